//! Locality (issue 31, scope 3): a host that already holds what a task
//! brings (its image) starts it without reading it from the consumer, so
//! among the hosts a task could go to, those that hold its data go first.
//!
//! One rule for both places the consumer orders hosts: the hosts that
//! answered, in the batch's policy order, when a task is handed out, and
//! the members ranked by their summaries when a round picks whom to ask.
//! The rule only moves holders ahead, keeping the order it was given within
//! holders and within the rest; it never adds or drops a host, so a claim
//! to hold something changes whom a task prefers, never whether it may run
//! there (the host still checks every chunk it reads, and a task still
//! starts when only non-holders are free). Pure: the caller says what
//! "holds" means for each host.

/// `order` with the hosts for which `holds` is true moved to the front, the
/// order kept within each part (a stable partition).
pub fn holders_first<T>(order: Vec<T>, holds: impl Fn(&T) -> bool) -> Vec<T> {
    let (mut first, rest): (Vec<T>, Vec<T>) = order.into_iter().partition(|h| holds(h));
    first.extend(rest);
    first
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holders_go_first_in_the_order_given_and_nobody_is_added_or_dropped() {
        // (name, holds): the policy's order is a, b, c, d, e.
        let hosts = vec![
            ("a", false),
            ("b", true),
            ("c", false),
            ("d", true),
            ("e", false),
        ];
        let got: Vec<&str> = holders_first(hosts.clone(), |h| h.1)
            .iter()
            .map(|h| h.0)
            .collect();
        assert_eq!(got, ["b", "d", "a", "c", "e"]);
        // Nobody holds it, or everybody: the policy's order unchanged.
        let none: Vec<(&str, bool)> = hosts.iter().map(|h| (h.0, false)).collect();
        assert_eq!(holders_first(none.clone(), |h| h.1), none);
        let all: Vec<(&str, bool)> = hosts.iter().map(|h| (h.0, true)).collect();
        assert_eq!(holders_first(all.clone(), |h| h.1), all);
        assert!(holders_first(Vec::<(&str, bool)>::new(), |h| h.1).is_empty());
    }
}
