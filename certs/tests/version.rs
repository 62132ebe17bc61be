//! `koord-queue-certs --version` names the crate version and the git revision it
//! was built from (see `koord_queue_buildinfo::version_test!`).

koord_queue_buildinfo::version_test!("koord-queue-certs");
