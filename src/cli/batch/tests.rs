//! Unit tests of `gleaner batch`'s argument parsing.

use super::*;

#[test]
fn ranges_parse_and_refuse_nonsense() {
    assert_eq!(parse_range("0..100"), Ok((0, 100)));
    assert_eq!(parse_range("-5..5"), Ok((-5, 5)));
    for bad in ["5..5", "3..1", "a..b", "10", "1..x"] {
        assert!(parse_range(bad).is_err(), "{bad}");
    }
}
