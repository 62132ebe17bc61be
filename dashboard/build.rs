//! Sets `KOORD_QUEUE_VERSION` (crate version and git revision) for `--version`.

fn main() {
    koord_queue_buildinfo::emit();
}
