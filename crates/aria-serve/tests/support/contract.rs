//! The semantics every `JobStore` must have (documented on the trait), as one check that any
//! implementation's test can run against an empty store:
//! `#[path = "support/contract.rs"] mod contract;` then `contract::run(&store)`.
#![allow(dead_code, clippy::unwrap_used)]

use std::time::Duration;

use aria_serve::jobs::{CancelOutcome, JobState, JobStore, ListFilter, NewJob, Outcome};
use aria_serve::ServeError;

fn job(id: &str, key: Option<&str>) -> NewJob {
    NewJob {
        id: id.into(),
        spec: format!("{{\"id\":\"{id}\"}}"),
        batch_key: key.map(str::to_string),
        steps: 8,
    }
}

const LONG: Duration = Duration::from_secs(60);

/// Run every check on `st`, which must be empty; ids are prefixed with `p` (so runs can
/// share a database).
pub fn run(st: &dyn JobStore, p: &str) {
    let id = |n: &str| format!("{p}{n}");
    // Submit: positions, the bound, duplicate ids.
    assert_eq!(st.submit(&job(&id("a"), Some("k")), 4).unwrap(), 0);
    assert_eq!(st.submit(&job(&id("b"), None), 4).unwrap(), 1);
    assert_eq!(st.submit(&job(&id("c"), Some("k")), 4).unwrap(), 2);
    assert_eq!(st.submit(&job(&id("d"), Some("k")), 4).unwrap(), 3);
    match st.submit(&job(&id("e"), None), 4) {
        Err(ServeError::QueueFull { depth: 4, max: 4 }) => {}
        r => panic!("expected QueueFull, got {r:?}"),
    }
    assert!(st.get(&id("e")).unwrap().is_none());
    assert!(
        st.submit(&job(&id("a"), None), 10).is_err(),
        "duplicate id accepted"
    );
    assert_eq!(st.position(&id("c")).unwrap(), Some(2));
    assert_eq!(st.counts().unwrap().queued, 4);

    // Claim: the oldest, plus same-key jobs up to max, in queue order.
    let got = st.claim("w1", 2, LONG).unwrap();
    let ids: Vec<_> = got.iter().map(|j| j.id.clone()).collect();
    assert_eq!(ids, [id("a"), id("c")]);
    assert!(got
        .iter()
        .all(|j| j.state == JobState::Running && j.attempts == 1));
    assert_eq!(got[0].worker.as_deref(), Some("w1"));
    assert_eq!(st.position(&id("b")).unwrap(), Some(0));
    assert_eq!(st.position(&id("a")).unwrap(), None);
    // Next: `b` alone (no key), then `d`.
    let got = st.claim("w2", 3, LONG).unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].id, id("b"));
    assert!(st.claim("w2", 0, LONG).unwrap().is_empty());

    // Progress and finish only for the holder.
    assert!(!st.progress(&id("a"), "w1", 3, 8, 0.4).unwrap());
    let a = st.get(&id("a")).unwrap().unwrap();
    assert_eq!((a.step, a.steps), (3, 8));
    assert!((a.progress - 0.4).abs() < 1e-6);
    assert!(!st.progress(&id("a"), "w2", 5, 8, 0.9).unwrap());
    assert_eq!(st.get(&id("a")).unwrap().unwrap().step, 3);
    assert!(!st
        .finish(&id("a"), "w2", &Outcome::Failed("x".into()))
        .unwrap());
    let done = Outcome::Done {
        result: format!("{}.wav", id("a")),
        timings: "{}".into(),
    };
    assert!(st.finish(&id("a"), "w1", &done).unwrap());
    let a = st.get(&id("a")).unwrap().unwrap();
    assert_eq!(a.state, JobState::Done);
    assert_eq!(a.progress, 1.0);
    assert!(a.finished_ms.is_some() && a.lease_until_ms.is_none());
    assert_eq!(a.result, Some(format!("{}.wav", id("a"))));
    assert!(
        !st.finish(&id("a"), "w1", &Outcome::Cancelled).unwrap(),
        "finished twice"
    );

    // Cancel: queued is removed, running is flagged, finished stays.
    assert_eq!(st.cancel(&id("d")).unwrap(), CancelOutcome::Removed);
    assert_eq!(
        st.get(&id("d")).unwrap().unwrap().state,
        JobState::Cancelled
    );
    assert!(st.claim("w3", 1, LONG).unwrap().is_empty());
    assert_eq!(st.cancel(&id("c")).unwrap(), CancelOutcome::Requested);
    assert!(st.get(&id("c")).unwrap().unwrap().cancel_requested);
    assert!(st.progress(&id("c"), "w1", 4, 8, 0.5).unwrap());
    assert_eq!(
        st.heartbeat("w1", &[id("c"), id("b")], LONG).unwrap(),
        [id("c")]
    );
    assert!(st.finish(&id("c"), "w1", &Outcome::Cancelled).unwrap());
    assert_eq!(
        st.cancel(&id("a")).unwrap(),
        CancelOutcome::AlreadyFinished(JobState::Done)
    );
    assert_eq!(st.cancel(&id("zz")).unwrap(), CancelOutcome::NotFound);

    // Release: back to the queue at its position, the attempt not counted.
    assert_eq!(st.submit(&job(&id("f"), None), 10).unwrap(), 0);
    assert_eq!(st.release("w2").unwrap(), 1);
    let b = st.get(&id("b")).unwrap().unwrap();
    assert_eq!(
        (b.state, b.attempts, b.worker.clone()),
        (JobState::Queued, 0, None)
    );
    assert_eq!(
        st.position(&id("b")).unwrap(),
        Some(0),
        "a released job keeps its place"
    );
    assert_eq!(st.position(&id("f")).unwrap(), Some(1));

    // Expired leases: requeued, then failed after max_attempts.
    let short = Duration::from_millis(1);
    let got = st.claim("dead", 1, short).unwrap();
    assert_eq!(got[0].id, id("b"));
    std::thread::sleep(Duration::from_millis(20));
    let r = st.requeue_expired(2).unwrap();
    assert_eq!(r.requeued, [id("b")]);
    assert!(!st
        .finish(&id("b"), "dead", &Outcome::Failed("late".into()))
        .unwrap());
    let got = st.claim("dead2", 1, short).unwrap();
    assert_eq!((got[0].id.clone(), got[0].attempts), (id("b"), 2));
    // A heartbeat keeps a lease alive.
    assert_eq!(
        st.heartbeat("dead2", &[id("b")], LONG).unwrap(),
        Vec::<String>::new()
    );
    std::thread::sleep(Duration::from_millis(20));
    assert!(st.requeue_expired(2).unwrap().requeued.is_empty());
    assert!(st.heartbeat("dead2", &[id("b")], short).is_ok());
    std::thread::sleep(Duration::from_millis(20));
    let r = st.requeue_expired(2).unwrap();
    assert_eq!(r.failed, [id("b")]);
    let b = st.get(&id("b")).unwrap().unwrap();
    assert_eq!(b.state, JobState::Failed);
    assert!(b.error.unwrap().contains("max_attempts"));

    // List: newest first, by state, paged.
    let all = st
        .list(&ListFilter {
            limit: 100,
            ..Default::default()
        })
        .unwrap();
    let mine: Vec<_> = all.iter().filter(|j| j.id.starts_with(p)).collect();
    assert_eq!(mine[0].id, id("f"));
    assert!(all.windows(2).all(|w| w[0].seq > w[1].seq));
    let queued = st
        .list(&ListFilter {
            state: Some(JobState::Queued),
            limit: 10,
            before_seq: None,
        })
        .unwrap();
    assert!(queued.iter().all(|j| j.state == JobState::Queued));
    let page = st
        .list(&ListFilter {
            state: None,
            limit: 1,
            before_seq: Some(mine[0].seq),
        })
        .unwrap();
    assert_eq!(page.len(), 1);
    assert!(page[0].seq < mine[0].seq);
    let c = st.counts().unwrap();
    assert!(c.done >= 1 && c.cancelled >= 2 && c.failed >= 1 && c.queued >= 1);
}
