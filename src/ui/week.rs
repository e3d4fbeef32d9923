//! The week of availability read off the node's history: for each weekday
//! and hour (in the history's zone), the share of looks at which the host
//! was available to a guest (S1 or S2). Pure: the series, thresholds and
//! `now` come in, a [`WeekGrid`] goes out; the caller runs it off the loop.

use super::svg::WeekGrid;
use crate::model::series::HostSeries;
use crate::model::state::{State, Thresholds};

/// How far back the heat map looks.
pub const WEEKS: i64 = 4;
/// Seconds between looks (4 weeks are 8,064 looks).
pub const LOOK_SECS: i64 = 300;

/// Availability by weekday and hour over the `WEEKS` weeks before `now`.
pub fn availability(series: &HostSeries, th: Thresholds, now: i64) -> WeekGrid {
    let mut counts = [[(0u32, 0u32); 24]; 7];
    let (Some(first), Some(last)) = (series.first_time(), series.last_time()) else {
        return grid(&counts);
    };
    let from = (now - WEEKS * 7 * 86_400).max(first);
    let until = now.min(last);
    let Some(mut cursor) = series.cursor(th, from) else {
        return grid(&counts);
    };
    let mut t = from;
    while t <= until {
        let state = cursor.state_at(t);
        let Ok(ts) = jiff::Timestamp::from_second(t) else {
            break;
        };
        let local = ts.to_zoned(series.tz.clone());
        let day = usize::try_from(local.weekday().to_monday_zero_offset()).unwrap_or(0) % 7;
        let hour = usize::try_from(local.hour()).unwrap_or(0) % 24;
        let cell = &mut counts[day][hour];
        cell.1 += 1;
        if matches!(state, State::S1 | State::S2) {
            cell.0 += 1;
        }
        t += LOOK_SECS;
    }
    grid(&counts)
}

fn grid(counts: &[[(u32, u32); 24]; 7]) -> WeekGrid {
    let mut g = WeekGrid {
        cells: [[None; 24]; 7],
    };
    for (d, row) in counts.iter().enumerate() {
        for (h, &(up, looks)) in row.iter().enumerate() {
            if looks > 0 {
                g.cells[d][h] = Some((f64::from(up) / f64::from(looks), looks));
            }
        }
    }
    g
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::series::Sample;

    /// A UTC series, one row a minute over `days` days from Monday
    /// 2024-01-01: busy (95 % CPU, S3 after the sustain time) from 09:00
    /// to 17:00 on weekdays, idle otherwise.
    fn office_hours(days: i64) -> HostSeries {
        let start = 1_704_067_200; // Monday 2024-01-01 00:00 UTC
        let mut s = HostSeries::new(60, 600, jiff::tz::TimeZone::UTC);
        for m in 0..days * 1440 {
            let t = start + m * 60;
            let day = (m / 1440) % 7;
            let hour = (m % 1440) / 60;
            let busy = day < 5 && (9..17).contains(&hour);
            s.push(Sample {
                time: t,
                cpu: if busy { 95.0 } else { 5.0 },
                free_mib: 4096,
                up: true,
            })
            .unwrap();
        }
        s
    }

    #[test]
    fn office_hours_show_as_unavailable_weekday_days_and_the_rest_as_available() {
        let series = office_hours(14);
        let now = series.last_time().unwrap();
        let g = availability(&series, Thresholds::default(), now);
        let at = |d: usize, h: usize| g.cells[d][h].unwrap().0;
        assert!(at(0, 12) < 0.05, "Mon 12:00 {}", at(0, 12));
        assert!(at(4, 15) < 0.05, "Fri 15:00 {}", at(4, 15));
        assert!(at(0, 3) > 0.95, "Mon 03:00 {}", at(0, 3));
        assert!(at(5, 12) > 0.95, "Sat 12:00 {}", at(5, 12));
        // Two weeks of looks every 5 minutes: 24 per cell.
        assert_eq!(g.cells[2][2].unwrap().1, 24);
    }

    #[test]
    fn an_empty_history_has_no_cells() {
        let series = HostSeries::new(60, 600, jiff::tz::TimeZone::UTC);
        let g = availability(&series, Thresholds::default(), 1_704_067_200);
        assert!(g.cells.iter().flatten().all(Option::is_none));
    }
}
