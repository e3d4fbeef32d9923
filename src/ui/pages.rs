//! The dashboard's HTML, rendered on the server from the node's domain
//! values. Every text that did not come from this file goes through
//! [`escape`]: job ids, commands, peers' addresses and versions, job-log
//! details and error messages can all be written by someone else.

use super::svg::escape;
use crate::consumer::batch::BatchView;
use crate::consumer::survey::SurveyedHost;
use crate::guest::GuestPhase;
use crate::history::store::JobEvent;
use crate::human;
use crate::node::host_loop::HostStatus;
use std::fmt::Write as _;

/// The pages, in the order of the navigation bar: (path, title).
pub const PAGES: [(&str, &str); 6] = [
    ("/", "Now"),
    ("/reliability", "Reliability"),
    ("/week", "Week"),
    ("/jobs", "Job log"),
    ("/hosts", "Pool"),
    ("/batches", "Batches"),
];

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:0;color:#222;background:#fafafa}\
header{background:#1d3557;color:#fff;padding:.6em 1em;display:flex;gap:1.5em;align-items:baseline}\
header a{color:#dfe8f5;text-decoration:none}header a.here{color:#fff;font-weight:bold;border-bottom:2px solid #fff}\
main{padding:1em 1.5em;max-width:60em}dl{display:grid;grid-template-columns:12em 1fr;gap:.3em 1em}\
dt{color:#555}dd{margin:0}table{border-collapse:collapse}td,th{padding:.25em .7em;border-bottom:1px solid #ddd;text-align:left;vertical-align:top}\
.state{font-size:1.6em;font-weight:bold}.S1,.S2{color:#2a7a2a}.S3,.S4{color:#b35c00}.S5{color:#a00}\
form{display:inline}button{font-size:1em;padding:.4em 1.1em;margin-right:.5em}.note{color:#666;font-size:.9em}\
.err{color:#a00}";

/// A whole page: head, navigation, `body`. `here` is the page's path.
pub fn layout(here: &str, node: &str, body: &str) -> String {
    let mut nav = String::new();
    for (path, title) in PAGES {
        let class = if path == here { " class=\"here\"" } else { "" };
        let _ = write!(nav, "<a href=\"{path}\"{class}>{title}</a>");
    }
    let title = PAGES
        .iter()
        .find(|(p, _)| *p == here)
        .map_or("Gleaner", |(_, t)| t);
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width\"><title>{title} · Gleaner {node}</title>\
<style>{STYLE}</style><script src=\"/app.js\" defer></script></head><body>\
<header><strong>Gleaner · {node}</strong>{nav}</header><main>{body}</main></body></html>",
        node = escape(node),
    )
}

/// A local time for people, in the system's zone.
pub fn when(unix: i64) -> String {
    match jiff::Timestamp::from_second(unix) {
        Ok(t) => t
            .to_zoned(jiff::tz::TimeZone::system())
            .strftime("%Y-%m-%d %H:%M:%S %Z")
            .to_string(),
        Err(_) => format!("{unix} (out of range)"),
    }
}

/// Why no guest runs now, in words: the host loop's typed reason (the one
/// `gleaner status` shows).
pub fn why_no_guest(s: &HostStatus) -> Option<String> {
    s.why_idle.map(|r| r.to_string())
}

/// The live part of the "now" page (the script replaces it every few seconds).
pub fn now_live(s: &HostStatus) -> String {
    let mut b = String::new();
    let state = s.state.map_or("none", |st| st.label());
    let describe = s.state.map_or("no reading yet", |st| st.describe());
    let paused = if s.paused {
        match s.paused_until {
            Some(u) => format!("yes, until {}", when(u)),
            None => "yes".to_string(),
        }
    } else {
        "no".to_string()
    };
    let _ = write!(
        b,
        "<p class=\"state {state}\" id=\"state\" data-state=\"{state}\" data-paused=\"{p}\">{state} · {}</p><dl>",
        escape(describe),
        p = s.paused,
    );
    let _ = write!(
        b,
        "<dt>Paused</dt><dd id=\"paused\">{}</dd>",
        escape(&paused)
    );
    let _ = write!(
        b,
        "<dt>Why no guest</dt><dd id=\"why\">{}</dd>",
        why_no_guest(s).map_or_else(|| "a guest is running".to_string(), |w| escape(&w))
    );
    if let Some(r) = &s.last {
        let _ = write!(
            b,
            "<dt>Owner's CPU load</dt><dd id=\"cpu\">{:.1} %</dd><dt>Memory free for a guest</dt><dd>{} MiB</dd><dt>Last sample</dt><dd>{} (every {})</dd>",
            r.cpu,
            r.free_mib,
            escape(&when(r.time)),
            human::duration(r.period.as_secs()),
        );
    }
    match &s.guest {
        Some((g, mem)) => {
            let phase = match g.phase {
                GuestPhase::Running => "running",
                GuestPhase::Stopped => "stopped",
                GuestPhase::Exited => "exited",
            };
            let _ = write!(
                b,
                "<dt>Guest</dt><dd id=\"guest\">{} · {phase} · nice {} · {mem} MiB declared · since {}</dd>",
                escape(g.job_id.as_str()),
                g.nice.map_or("-".to_string(), |n| n.to_string()),
                escape(&when(g.started_at.as_second())),
            );
        }
        None => {
            let _ = write!(b, "<dt>Guest</dt><dd id=\"guest\">none</dd>");
        }
    }
    for (window, tr) in &s.predictions {
        let value = match tr {
            Ok((tr, crate::report::Basis::Record)) => format!("{tr:.3}"),
            Ok((tr, crate::report::Basis::Prior(source))) => format!(
                "{tr:.3} <span class=\"note\">(a prior: no past day of this kind in the record yet), {}</span>",
                source.label()
            ),
            Err(e) => format!("<span class=\"note\">{}</span>", escape(e)),
        };
        let _ = write!(
            b,
            "<dt>TR of a {} job now</dt><dd>{value}</dd>",
            human::duration(*window)
        );
    }
    let _ = write!(
        b,
        "<dt>Samples</dt><dd>{}</dd><dt>Owner load</dt><dd>{}</dd><dt>Containment</dt><dd>{}</dd></dl>",
        s.samples,
        escape(&s.owner_load.to_string()),
        escape(&s.containment),
    );
    b
}

/// The "now" page: the live part and the owner's buttons.
pub fn now_page(s: &HostStatus, csrf: &str) -> String {
    let csrf = escape(csrf);
    let button = |action: &str, label: &str| {
        format!(
            "<form method=\"post\" action=\"/action/{action}\"><input type=\"hidden\" name=\"csrf\" value=\"{csrf}\"><button id=\"{action}\" type=\"submit\">{label}</button></form>"
        )
    };
    format!(
        "<h1>Now</h1><div id=\"live\" data-refresh=\"/live\">{}</div><p>{}{}{}</p>\
<p class=\"note\">Pausing kills a running guest and records the time as S5; \"Finish\" lets it end first. The page refreshes itself every 2 s.</p>",
        now_live(s),
        button("pause", "Pause"),
        button("finish", "Finish the job, then pause"),
        button("resume", "Resume"),
    )
}

/// An error where a page's content would be.
pub fn error_block(what: &str, e: &str) -> String {
    format!("<p class=\"err\">{}: {}</p>", escape(what), escape(e))
}

/// The job log, newest first.
pub fn jobs_page(events: &[JobEvent]) -> String {
    let mut b = String::from("<h1>Job log</h1>");
    if events.is_empty() {
        b.push_str("<p>No guest job has run here yet.</p>");
        return b;
    }
    b.push_str("<table><tr><th>Time</th><th>Job</th><th>Event</th><th>Detail</th></tr>");
    for e in events {
        let _ = write!(
            b,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&when(e.time)),
            escape(&e.job),
            escape(&e.kind),
            escape(&e.detail)
        );
    }
    b.push_str("</table>");
    b
}

fn opt<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref()
        .map_or("-".to_string(), |v| escape(&v.to_string()))
}

/// The pool's hosts as the consumer's survey ranks them.
pub fn hosts_table(hosts: &[SurveyedHost]) -> String {
    if hosts.is_empty() {
        return "<p>No other host answered.</p>".to_string();
    }
    let mut b = String::from(
        "<table><tr><th>Peer</th><th>State</th><th>TR (1 h)</th><th>Γ</th><th>Slot free</th><th>CPUs</th><th>Memory</th><th>Version</th></tr>",
    );
    for h in hosts {
        let peer = h.peer.to_base58();
        let _ = write!(
            b,
            "<tr><td title=\"{peer}\">{short}…</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            h.state.map_or("-", |st| st.label()),
            h.tr.map_or("-".to_string(), |t| format!("{t:.3}")),
            h.power.map_or("-".to_string(), |p| format!("{p:.2}")),
            opt(&h.slot_free),
            opt(&h.logical_cpus),
            h.memory_mib.map_or("-".to_string(), |m| format!("{m} MiB")),
            opt(&h.version),
            peer = escape(&peer),
            short = escape(&peer.chars().take(16).collect::<String>()),
        );
    }
    b.push_str("</table>");
    b
}

/// The consumer's batches.
pub fn batches_table(batches: &[BatchView]) -> String {
    if batches.is_empty() {
        return "<p>No batch submitted from this node (<code>gleaner batch submit</code>).</p>"
            .to_string();
    }
    let mut b = String::from(
        "<table><tr><th>Batch</th><th>Name</th><th>Created</th><th>Queued</th><th>Running</th><th>Done</th><th>Failed</th><th>Cancelled</th><th>ETA</th></tr>",
    );
    for v in batches {
        let c = &v.counts;
        let _ = write!(
            b,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&v.record.id.to_string()),
            opt(&v.record.name),
            escape(&when(v.record.created_unix)),
            c.queued,
            c.running,
            c.done,
            c.failed,
            c.cancelled,
            v.eta_unix.map_or("-".to_string(), |t| escape(&when(t))),
        );
    }
    b.push_str("</table>");
    b
}

/// The page a refused request gets (never with the reason's details beyond
/// the fixed message).
pub fn refused(message: &str) -> String {
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Gleaner dashboard</title></head>\
<body><h1>Not allowed</h1><p>{}</p></body></html>",
        escape(message)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_log_text_is_escaped() {
        let events = vec![JobEvent {
            time: 1_700_000_000,
            job: "<b>j</b>".into(),
            kind: "exited".into(),
            detail: "<script>alert(1)</script>".into(),
        }];
        let html = jobs_page(&events);
        assert!(
            !html.contains("<script>") && !html.contains("<b>j"),
            "{html}"
        );
        assert!(html.contains("&lt;script&gt;"));
    }

    #[test]
    fn a_hosts_hostile_fields_are_escaped() {
        let mut host = SurveyedHost::new(libp2p::PeerId::random());
        host.version = Some("\"><img src=x><script>".into());
        let html = hosts_table(&[host]);
        assert!(
            !html.contains("<script") && !html.contains("<img"),
            "{html}"
        );
        assert!(html.contains("&lt;img"), "{html}");
    }

    #[test]
    fn the_layout_marks_the_current_page_and_escapes_the_node_name() {
        let html = layout("/week", "<host>", "x");
        assert!(html.contains("<a href=\"/week\" class=\"here\">Week</a>"));
        assert!(html.contains("&lt;host&gt;") && !html.contains("<host>"));
    }
}
