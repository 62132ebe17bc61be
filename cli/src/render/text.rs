//! Small pieces of text: ages as kubectl prints them, countdowns, resource
//! amounts, usage bars.

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;

/// How long ago `then` (RFC 3339) was, as kubectl's AGE column prints it
/// (`45s`, `3m20s`, `2h`, `4d5h`); `-` when it cannot be read.
pub fn age(then: Option<&str>, now: Timestamp) -> String {
    let Some(then) = then.and_then(|t| t.parse::<Timestamp>().ok()) else {
        return "-".into();
    };
    human_duration(now.as_second() - then.as_second())
}

/// When `at` (RFC 3339) comes, from `now`: `in 8s`, or `now` when past.
pub fn countdown(at: Option<&str>, now: Timestamp) -> String {
    let Some(at) = at.and_then(|t| t.parse::<Timestamp>().ok()) else {
        return "-".into();
    };
    let secs = at.as_second() - now.as_second();
    if secs <= 0 {
        "now".into()
    } else {
        format!("in {}", human_duration(secs))
    }
}

/// kubectl's `HumanDuration`: seconds up to 2 minutes, then minutes (and
/// seconds under 10 minutes), hours (and minutes under 8 hours), days,
/// years.
pub fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    let s = seconds.max(0);
    if s < 120 {
        return format!("{s}s");
    }
    let minutes = s / 60;
    if minutes < 10 {
        return match s % 60 {
            0 => format!("{minutes}m"),
            r => format!("{minutes}m{r}s"),
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = s / 3600;
    if hours < 8 {
        return match minutes % 60 {
            0 => format!("{hours}h"),
            m => format!("{hours}h{m}m"),
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        return match hours % 24 {
            0 => format!("{}d", hours / 24),
            h => format!("{}d{h}h", hours / 24),
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    format!("{}y", hours / 24 / 365)
}

/// Amounts by resource as one cell: `cpu=4,memory=8Gi`, `-` when none.
pub fn amounts(map: &BTreeMap<String, String>) -> String {
    if map.is_empty() {
        return "-".into();
    }
    map.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// One resource's amount as one cell, `-` when absent.
pub fn amount(map: &BTreeMap<String, String>, resource: &str) -> String {
    map.get(resource).cloned().unwrap_or_else(|| "-".into())
}

/// Characters of a usage bar.
const BAR_WIDTH: i64 = 10;

/// A bar of `used` out of `max` (quantities of `resource`): `███░░░░░░░ 30%`;
/// `no max` when there is none, `?` when the amounts cannot be read. Over
/// the max (a lowered max) shows the full bar and the real percentage.
pub fn bar(resource: &str, used: Option<&str>, max: Option<&str>) -> String {
    let Some(max) = max else {
        return "no max".into();
    };
    let parse = |t: &str| koord_queue_model::parse_quantity(resource, t).ok();
    let (Some(used), Some(max)) = (parse(used.unwrap_or("0")), parse(max)) else {
        return "?".into();
    };
    if max <= 0 {
        return "no room".into();
    }
    let percent = used.saturating_mul(100) / max;
    let filled = (used.saturating_mul(BAR_WIDTH) + max / 2) / max;
    let filled = filled.clamp(0, BAR_WIDTH);
    let mut out = String::new();
    for i in 0..BAR_WIDTH {
        out.push(if i < filled { '█' } else { '░' });
    }
    format!("{out} {percent}%")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_kubectl_prints_them() {
        let cases = [
            (5, "5s"),
            (119, "119s"),
            (200, "3m20s"),
            (240, "4m"),
            (1500, "25m"),
            (3 * 3600 + 5 * 60, "3h5m"),
            (20 * 3600, "20h"),
            (3 * 86400 + 3600, "3d1h"),
            (30 * 86400, "30d"),
            (3 * 365 * 86400, "3y"),
        ];
        for (s, want) in cases {
            assert_eq!(human_duration(s), want, "{s}s");
        }
    }

    #[test]
    fn bars_fill_by_tenths_and_say_the_percentage() {
        assert_eq!(bar("cpu", Some("3"), Some("10")), "███░░░░░░░ 30%");
        assert_eq!(bar("cpu", Some("500m"), Some("1")), "█████░░░░░ 50%");
        assert_eq!(bar("memory", Some("16Gi"), Some("8Gi")), "██████████ 200%");
        assert_eq!(bar("cpu", None, Some("4")), "░░░░░░░░░░ 0%");
        assert_eq!(bar("cpu", Some("1"), None), "no max");
    }

    #[test]
    fn ages_and_countdowns_are_measured_from_the_given_now() {
        let now: Timestamp = "2026-12-05T10:05:00Z".parse().unwrap_or_default();
        assert_eq!(age(Some("2026-12-05T10:01:40Z"), now), "3m20s");
        assert_eq!(countdown(Some("2026-12-05T10:05:08Z"), now), "in 8s");
        assert_eq!(countdown(Some("2026-12-05T10:04:00Z"), now), "now");
        assert_eq!(age(None, now), "-");
    }
}
