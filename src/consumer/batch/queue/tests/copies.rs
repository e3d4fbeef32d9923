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

/// The one host that may take the third copy does not answer the round
/// that asks it (a timeout): its summary still says it is free, so nothing
/// it announces is news, and without a second ask the task would wait for
/// ever. The queue asks it again, later (and less often while it keeps not
/// answering), and the copy starts when it answers.
#[test]
fn a_host_that_did_not_answer_is_asked_again_later() {
    let mut core = core(3);
    let mut now = start();
    let pool = vec![host(0.9), host(0.8), host(0.7)];
    let id = two_copies_disagree(&mut core, now, &pool);
    let third = pool[2].peer;
    // As the pool's summaries list each member: free, not asked.
    let looked: Vec<SurveyedHost> = pool
        .iter()
        .map(|h| SurveyedHost {
            answered: false,
            summarised: true,
            ..h.clone()
        })
        .collect();
    let silent = SurveyedHost {
        answered: false,
        summarised: false,
        error: Some("timeout".into()),
        ..pool[2].clone()
    };
    let mut asks_of_third = 0;
    let mut started_at = None;
    for _ in 0..900 {
        now = after(now, 1);
        if !core.wants_survey(now) {
            continue;
        }
        let Some((most, skip)) = round_of(&core.start_survey(now)) else {
            continue;
        };
        let asks = most.unwrap_or(u32::MAX) as usize;
        let answers: Vec<SurveyedHost> = if asks == 0 {
            looked.clone()
        } else {
            let asked: Vec<&SurveyedHost> = pool
                .iter()
                .filter(|h| !skip.contains(&h.peer))
                .take(asks)
                .collect();
            let mut answers = Vec::new();
            for h in asked {
                if h.peer == third {
                    asks_of_third += 1;
                    // It does not answer the first two asks.
                    answers.push(if asks_of_third <= 2 {
                        silent.clone()
                    } else {
                        h.clone()
                    });
                } else {
                    answers.push(h.clone());
                }
            }
            answers
        };
        let actions = core.on_survey(now, Ok(answers));
        if launches(&actions).contains(&(0, third)) {
            started_at = Some(now);
            break;
        }
    }
    assert!(
        started_at.is_some(),
        "the third copy never started: the host that did not answer was asked {asks_of_third} times"
    );
    assert_eq!(asks_of_third, 3, "asked again after each silence");
    let host = third.to_base58();
    assert_eq!(
        core.task(id, 0).unwrap().host.as_deref(),
        Some(host.as_str())
    );
}
