//! Placement of a batch that brings its image (issue 31, scope 3): a host
//! whose summary says it holds the image goes first among the free hosts
//! that answered, whatever the policy's order says of the others, without
//! leaving any free host idle; and a round asks those holders first.

use super::*;
use crate::consumer::batch::record::BatchImage;

const IMAGE: [u8; 32] = [7; 32];

fn in_image(tasks: i64) -> NewBatch {
    NewBatch {
        image: Some(BatchImage {
            local: PathBuf::from("/work/probe.tar"),
            id: IMAGE,
        }),
        ..batch(tasks)
    }
}

/// A free host that answered with `tr` and says it holds `images`.
fn holding(tr: f64, images: &[[u8; 32]]) -> SurveyedHost {
    SurveyedHost {
        images: images.to_vec(),
        ..host(tr)
    }
}

#[test]
fn a_task_in_an_image_goes_to_a_free_host_that_holds_it() {
    let now = start();
    let good = holding(0.9, &[]);
    let holder = holding(0.5, &[[1; 32], IMAGE]);
    let other = holding(0.95, &[[1; 32]]);
    let hosts = vec![good.clone(), holder.clone(), other.clone()];

    // The policy alone puts the holder last.
    let mut plain = core(3);
    let _ = admit(&mut plain, now, batch(1));
    let _ = plain.start_survey(now);
    let actions = plain.on_survey(now, Ok(hosts.clone()));
    assert_eq!(launches(&actions), vec![(0, other.peer)]);

    // In the image: the holder first; a host holding another image is none.
    let mut core = core(3);
    let _ = admit(&mut core, now, in_image(1));
    let actions = core.start_survey(now);
    assert!(
        matches!(actions.as_slice(), [Action::Survey { query, .. }] if query.images == vec![IMAGE]),
        "a round names the image, so holders are asked first: {actions:?}"
    );
    let actions = core.on_survey(now, Ok(hosts));
    assert_eq!(launches(&actions), vec![(0, holder.peer)]);
}

#[test]
fn holders_go_first_but_every_free_host_still_takes_work() {
    let now = start();
    let (a, b) = (holding(0.9, &[]), holding(0.8, &[]));
    let holder = holding(0.3, &[IMAGE]);
    let mut core = core(3);
    let _ = admit(&mut core, now, in_image(3));
    let _ = core.start_survey(now);
    let actions = core.on_survey(now, Ok(vec![a.clone(), holder.clone(), b.clone()]));
    // The holder first, then the policy's order: nobody left idle.
    assert_eq!(
        launches(&actions),
        vec![(0, holder.peer), (1, a.peer), (2, b.peer)]
    );
}

#[test]
fn a_holder_that_is_busy_or_did_not_answer_takes_nothing() {
    let now = start();
    let free = holding(0.5, &[]);
    let mut busy = holding(0.99, &[IMAGE]);
    busy.slot_free = Some(false);
    let mut silent = holding(0.99, &[IMAGE]);
    silent.answered = false;
    silent.summarised = true;
    let mut core = core(3);
    let _ = admit(&mut core, now, in_image(1));
    let _ = core.start_survey(now);
    let actions = core.on_survey(now, Ok(vec![busy, silent, free.clone()]));
    assert_eq!(launches(&actions), vec![(0, free.peer)]);
}
