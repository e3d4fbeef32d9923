//! A verified task's further copy reaches a host that may run it: when two
//! copies disagree, the round that looks for the third asks the hosts that
//! have run none, not those that ran one — with tail copies on (the
//! default) as without.

use super::*;

/// Runs `core`'s batch on `pool` until its two copies (on `pool[0]` and
/// `pool[1]`) have landed and disagree.
fn two_copies_disagree(core: &mut QueueCore, now: Now, pool: &[SurveyedHost]) -> BatchId {
    let (id, _) = admit(core, now, checked_by_two(batch(1)));
    let _ = core.start_survey(now);
    let actions = core.on_survey(now, Ok(pool.to_vec()));
    assert_eq!(
        launches(&actions),
        vec![(0, pool[0].peer), (0, pool[1].peer)],
        "two copies, the third host idle"
    );
    for (host, digest) in [(pool[0].peer, 1), (pool[1].peer, 2)] {
        let _ = core.on_ended(now, id, 0, host, landed(0));
        let _ = core.on_verdict(
            now,
            id,
            0,
            Verdict::Judged {
                copy: Ok(copy_of(host, digest)),
                agrees_with: Vec::new(),
            },
        );
    }
    assert_eq!(core.task(id, 0).unwrap().state, TaskState::Running);
    id
}

#[test]
fn the_round_after_a_disagreement_asks_the_host_that_ran_no_copy() {
    for tail_copies in [true, false] {
        let mut core = core(3);
        core.set_tail_copies(tail_copies);
        let now = start();
        let pool = vec![host(0.9), host(0.8), host(0.7)];
        let id = two_copies_disagree(&mut core, now, &pool);

        let now = after(now, 1);
        assert!(core.wants_survey(now), "a task wants another copy");
        let (most, skip) = round_of(&core.start_survey(now)).expect("a round");
        assert!(
            skip.contains(&pool[0].peer) && skip.contains(&pool[1].peer),
            "tail copies {tail_copies}: the hosts that ran a copy are not asked: {skip:?}"
        );
        assert!(!skip.contains(&pool[2].peer));
        // The round's few asks (the survey's first hosts not skipped) reach
        // the third host, which takes the third copy.
        let asked: Vec<SurveyedHost> = pool
            .iter()
            .filter(|h| !skip.contains(&h.peer))
            .take(most.expect("placement bounds its asks") as usize)
            .cloned()
            .collect();
        let actions = core.on_survey(now, Ok(asked));
        assert_eq!(
            launches(&actions),
            vec![(0, pool[2].peer)],
            "tail copies {tail_copies}: the third copy starts"
        );
        let third = pool[2].peer.to_base58();
        assert_eq!(
            core.task(id, 0).unwrap().host.as_deref(),
            Some(third.as_str())
        );
    }
}
