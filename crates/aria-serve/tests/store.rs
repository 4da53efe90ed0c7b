//! The SQLite job store against the `JobStore` contract, in memory and in a file reopened.
#![allow(clippy::unwrap_used)]

#[path = "support/contract.rs"]
mod contract;

use aria_serve::jobs::sqlite::SqliteStore;
use aria_serve::jobs::{JobState, JobStore, NewJob};

#[test]
fn sqlite_store_meets_the_contract() {
    contract::run(&SqliteStore::in_memory().unwrap(), "m-");
}

#[test]
fn sqlite_store_is_durable_across_reopen() {
    let dir = aria_testing::TempDir::new("serve-store");
    let path = dir.join("jobs.sqlite");
    {
        let st = SqliteStore::open(&path).unwrap();
        contract::run(&st, "f-");
        let j = NewJob {
            id: "kept".into(),
            spec: "{}".into(),
            batch_key: None,
            steps: 3,
        };
        st.submit(&j, 100).unwrap();
    }
    let st = SqliteStore::open(&path).unwrap();
    let r = st.get("kept").unwrap().unwrap();
    assert_eq!((r.state, r.steps), (JobState::Queued, 3));
    assert_eq!(st.get("f-a").unwrap().unwrap().state, JobState::Done);
}
