//! What users see: positions and reasons on units, Queue status, metrics.

use super::*;

impl Controller {
    /// Positions and reasons of waiting units, written only when changed and
    /// at most once per status interval per unit, within a budget per pass.
    /// Returns whether the pass was complete: every waiting unit compared,
    /// none left for a later pass.
    pub(super) fn publish_positions(&mut self, now: Instant) -> bool {
        let scan = scan_positions(
            &self.core,
            &self.units,
            now,
            if self.writer.latency_ms() >= SLOW_WRITES_MS {
                self.settings.status_interval * SLOW_VISIBILITY_FACTOR
            } else {
                self.settings.status_interval
            },
            VISIBILITY_BUDGET,
        );
        let writes = scan.writes;
        for (k, position, message) in writes {
            let Some(st) = self.units.get_mut(&k) else {
                continue;
            };
            st.publishing = true;
            st.last_published = Some(now);
            // An Event when the reason (not just the place) changes.
            let reason_changed =
                strip_position(st.rec.message.as_deref()) != strip_position(Some(&message));
            let event_due = st
                .last_waiting_event
                .is_none_or(|t| now.duration_since(t) >= WAITING_EVENT_INTERVAL);
            let job = self
                .jobs
                .get(&st.rec.job_key())
                .filter(|j| j.unit_name == st.rec.name)
                .map(job_ref);
            if reason_changed
                && event_due
                && let Some(job) = job
            {
                st.last_waiting_event = Some(now);
                self.event(&job, false, "Waiting", message.clone());
            }
            self.writer.submit(Write::Visibility {
                unit: k,
                position,
                message,
            });
        }
        scan.complete
    }

    /// `Queue.status`: the first waiting units in order and the counts,
    /// written only when changed. Returns whether every Queue was compared
    /// (none left for a later pass).
    pub(super) fn publish_queue_status(&mut self, now: Instant) -> bool {
        let mut complete = true;
        let warnings: Vec<(String, String)> = self
            .core
            .min_warnings()
            .iter()
            .map(|w| (w.quota.to_string(), w.to_string()))
            .collect();
        let names: Vec<String> = self.queues.keys().cloned().collect();
        for name in names {
            // A Queue with a write in flight is looked at again when its
            // result arrives (which reopens the gate).
            if self.queue_writes.contains(&name) {
                continue;
            }
            if self
                .queue_published
                .get(&name)
                .is_some_and(|t| now.duration_since(*t) < self.settings.status_interval)
            {
                complete = false;
                continue;
            }
            let counts = self.core.queue_counts(&name).unwrap_or_default();
            // Most passes change nothing: compare with the published status
            // in place before building a new one (up to 1,000 entries of two
            // strings for each of 1,000 queues, every pass).
            if let Some(published) = self.queues.get(&name).and_then(|q| q.status.as_ref())
                && published.pending == i64::try_from(counts.pending).ok()
                && published.admitted == i64::try_from(counts.admitted).ok()
                && published.queue_item_details.len() == 1
                && details_match(
                    published
                        .queue_item_details
                        .get("active")
                        .map_or(&[], Vec::as_slice),
                    self.core.queue_waiting(&name).take(QUEUE_DETAILS_LIMIT),
                )
                && min_conditions(&name, &warnings, published.conditions.clone())
                    == published.conditions
            {
                continue;
            }
            let details: Vec<QueueItemDetail> = self
                .core
                .queue_waiting(&name)
                .take(QUEUE_DETAILS_LIMIT)
                .map(|w| {
                    let (ns, n) = split_key(w.key);
                    QueueItemDetail {
                        name: n.to_string(),
                        namespace: ns.to_string(),
                        priority: w.priority,
                        position: i64::try_from(w.position).unwrap_or(i64::MAX),
                    }
                })
                .collect();
            let Some(queue) = self.queues.get_mut(&name) else {
                continue;
            };
            let mut status = queue.status.clone().unwrap_or_default();
            let mut items = BTreeMap::new();
            items.insert("active".to_string(), details);
            status.queue_item_details = items;
            status.pending = Some(i64::try_from(counts.pending).unwrap_or(i64::MAX));
            status.admitted = Some(i64::try_from(counts.admitted).unwrap_or(i64::MAX));
            status.conditions = min_conditions(&name, &warnings, status.conditions);
            if queue.status.as_ref() == Some(&status)
                || (queue.status.is_none() && status == empty_status())
            {
                continue;
            }
            queue.status = Some(status.clone());
            self.queue_published.insert(name.clone(), now);
            self.queue_writes.insert(name.clone());
            self.writer.submit(Write::QueueStatus {
                name,
                status: Box::new(status),
            });
        }
        complete
    }

    pub(super) fn publish_metrics(&mut self) {
        for q in self.core.queues() {
            let labels = QueueLabels {
                queue: q.name.to_string(),
            };
            if let Some(c) = self.core.queue_counts(q.name) {
                self.metrics
                    .pending
                    .get_or_create(&labels)
                    .set(i64::try_from(c.pending).unwrap_or(i64::MAX));
                self.metrics
                    .admitted
                    .get_or_create(&labels)
                    .set(i64::try_from(c.admitted).unwrap_or(i64::MAX));
            }
        }
        let mut used = Vec::new();
        for name in self.quotas.keys() {
            let Some(f) = self.core.quota_figures(name) else {
                continue;
            };
            let labels = |resource: &str| QuotaLabels {
                quota: name.clone(),
                resource: resource.to_string(),
            };
            for (family, values) in [
                (&self.metrics.quota_min, &f.min),
                (&self.metrics.quota_max, &f.max),
            ] {
                for (resource, amount) in values.iter() {
                    family.get_or_create(&labels(resource)).set(amount);
                }
            }
            used.extend(f.used.iter().map(|(r, amount)| (labels(r), amount)));
        }
        self.quota_used_series = self
            .metrics
            .publish_quota_used(&self.quota_used_series, used);
    }
}
