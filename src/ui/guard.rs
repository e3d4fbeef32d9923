//! Who may use the dashboard: the token, the Host and Origin checks and the
//! CSRF token, as pure decisions over a request's facts (no HTTP types), so
//! each rule has a small test.
//!
//! The threat is a web page the owner visits while the node runs. It can
//! make the browser send requests to `127.0.0.1:PORT` (a form POST, an
//! image), or rebind its own DNS name to 127.0.0.1 and read the answers as
//! same-origin. So: every request must name our address in `Host` (a
//! rebound name does not); a request that carries an `Origin` must carry
//! ours, and an action (POST) must carry it; every page needs the token
//! (from the URL the node printed, then a cookie); every action also needs
//! the CSRF token, which only a page we served can read.

/// Everything the checks need, fixed when the dashboard starts.
#[derive(Debug, Clone)]
pub struct Guard {
    token: String,
    csrf: String,
    cookie_name: String,
    /// `Host` values that name us: the bound address and `localhost`, with the port.
    hosts: Vec<String>,
}

/// The facts of a request the checks read (header values as sent).
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestFacts<'a> {
    /// An action (POST) rather than a page (GET).
    pub action: bool,
    pub host: Option<&'a str>,
    pub origin: Option<&'a str>,
    /// The whole `Cookie` header.
    pub cookie: Option<&'a str>,
    /// `token=` from the query string.
    pub query_token: Option<&'a str>,
}

/// A request the checks let through, and how it proved itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// By the session cookie.
    Cookie,
    /// By the token in the URL: the answer sets the cookie and redirects to
    /// the same page without the token, so it leaves the address bar.
    Url,
}

/// Why a request was refused; each maps to one status and message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the Host header does not name this dashboard (DNS rebinding?)")]
    Host,
    #[error("the request comes from another origin")]
    Origin,
    #[error("no access token: open the URL `gleaner node` printed (it ends in ?token=...)")]
    NoToken,
    #[error("wrong access token")]
    BadToken,
    #[error("missing or wrong CSRF token: reload the page and try again")]
    Csrf,
}

impl Refusal {
    /// The HTTP status of the refusal.
    pub fn status(self) -> u16 {
        match self {
            Refusal::NoToken | Refusal::BadToken => 401,
            Refusal::Host | Refusal::Origin | Refusal::Csrf => 403,
        }
    }
}

/// Longest header value the checks look at; longer ones are refused unread.
const MAX_HEADER: usize = 4096;

impl Guard {
    /// The guard for a dashboard bound at `addr` with access token `token`.
    pub fn new(token: &str, addr: std::net::SocketAddr) -> Guard {
        let port = addr.port();
        let ip = match addr.ip() {
            std::net::IpAddr::V4(ip) => ip.to_string(),
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
        };
        Guard {
            token: token.to_string(),
            csrf: csrf_for(token),
            // Cookies are not kept apart by port: two nodes on one machine
            // must not overwrite each other's.
            cookie_name: format!("gleaner_ui_{port}"),
            hosts: vec![format!("{ip}:{port}"), format!("localhost:{port}")],
        }
    }

    /// The name of the session cookie.
    pub fn cookie_name(&self) -> &str {
        &self.cookie_name
    }

    /// The CSRF token forms carry (derived from the access token, so it
    /// survives restarts and needs no state).
    pub fn csrf(&self) -> &str {
        &self.csrf
    }

    /// The `Set-Cookie` value that opens a session.
    pub fn set_cookie(&self) -> String {
        format!(
            "{}={}; Path=/; HttpOnly; SameSite=Strict",
            self.cookie_name, self.token
        )
    }

    /// Host, then Origin, then the token; see the module's reasons.
    pub fn check(&self, req: &RequestFacts<'_>) -> Result<Access, Refusal> {
        let host = req
            .host
            .filter(|h| h.len() <= MAX_HEADER)
            .ok_or(Refusal::Host)?;
        if !self
            .hosts
            .iter()
            .any(|h| h.eq_ignore_ascii_case(host.trim()))
        {
            return Err(Refusal::Host);
        }
        match req.origin {
            Some(origin) if !self.is_our_origin(origin) => return Err(Refusal::Origin),
            None if req.action => return Err(Refusal::Origin),
            _ => {}
        }
        if let Some(token) = req.cookie.and_then(|c| self.cookie_token(c)) {
            if same_secret(token, &self.token) {
                return Ok(Access::Cookie);
            }
        }
        match req.query_token {
            // A token in the URL opens a page, never an action.
            Some(token) if !req.action && same_secret(token, &self.token) => Ok(Access::Url),
            Some(_) => Err(Refusal::BadToken),
            None if req.cookie.and_then(|c| self.cookie_token(c)).is_some() => {
                Err(Refusal::BadToken)
            }
            None => Err(Refusal::NoToken),
        }
    }

    /// An action's CSRF field.
    pub fn check_csrf(&self, field: Option<&str>) -> Result<(), Refusal> {
        match field {
            Some(f) if same_secret(f, &self.csrf) => Ok(()),
            _ => Err(Refusal::Csrf),
        }
    }

    fn is_our_origin(&self, origin: &str) -> bool {
        origin.len() <= MAX_HEADER
            && origin
                .strip_prefix("http://")
                .is_some_and(|rest| self.hosts.iter().any(|h| h.eq_ignore_ascii_case(rest)))
    }

    fn cookie_token<'a>(&self, header: &'a str) -> Option<&'a str> {
        if header.len() > MAX_HEADER {
            return None;
        }
        header.split(';').find_map(|pair| {
            let (name, value) = pair.trim().split_once('=')?;
            (name == self.cookie_name).then_some(value)
        })
    }
}

/// The CSRF token of an access token.
fn csrf_for(token: &str) -> String {
    blake3::derive_key("gleaner dashboard csrf v1", token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Compares secrets in time that does not depend on where they differ.
fn same_secret(given: &str, ours: &str) -> bool {
    let (a, b) = (given.as_bytes(), ours.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn guard() -> Guard {
        Guard::new(TOKEN, "127.0.0.1:8385".parse().unwrap())
    }

    fn page<'a>() -> RequestFacts<'a> {
        RequestFacts {
            host: Some("127.0.0.1:8385"),
            ..RequestFacts::default()
        }
    }

    #[test]
    fn a_page_needs_the_token_from_the_url_or_the_cookie() {
        let g = guard();
        assert_eq!(g.check(&page()), Err(Refusal::NoToken));
        let url = RequestFacts {
            query_token: Some(TOKEN),
            ..page()
        };
        assert_eq!(g.check(&url), Ok(Access::Url));
        let cookie = format!("other=1; gleaner_ui_8385={TOKEN}");
        let by_cookie = RequestFacts {
            cookie: Some(&cookie),
            ..page()
        };
        assert_eq!(g.check(&by_cookie), Ok(Access::Cookie));
        let wrong = RequestFacts {
            query_token: Some(&TOKEN[1..]),
            ..page()
        };
        assert_eq!(g.check(&wrong), Err(Refusal::BadToken));
        let other_port = format!("gleaner_ui_9999={TOKEN}");
        let other = RequestFacts {
            cookie: Some(&other_port),
            ..page()
        };
        assert_eq!(g.check(&other), Err(Refusal::NoToken));
    }

    #[test]
    fn a_rebound_or_missing_host_is_refused_even_with_the_token() {
        let g = guard();
        for host in [
            None,
            Some("evil.example:8385"),
            Some("127.0.0.1:8386"),
            Some("127.0.0.1"),
        ] {
            let r = RequestFacts {
                host,
                query_token: Some(TOKEN),
                ..page()
            };
            assert_eq!(g.check(&r), Err(Refusal::Host), "{host:?}");
        }
        let r = RequestFacts {
            host: Some("LOCALHOST:8385"),
            query_token: Some(TOKEN),
            ..page()
        };
        assert_eq!(g.check(&r), Ok(Access::Url));
        let v6 = Guard::new(TOKEN, "[::1]:7000".parse().unwrap());
        let r = RequestFacts {
            host: Some("[::1]:7000"),
            query_token: Some(TOKEN),
            ..page()
        };
        assert_eq!(v6.check(&r), Ok(Access::Url));
    }

    #[test]
    fn an_action_needs_our_origin_and_never_takes_the_token_from_the_url() {
        let g = guard();
        let cookie = format!("gleaner_ui_8385={TOKEN}");
        let ours = RequestFacts {
            action: true,
            origin: Some("http://127.0.0.1:8385"),
            cookie: Some(&cookie),
            ..page()
        };
        assert_eq!(g.check(&ours), Ok(Access::Cookie));
        for origin in [
            None,
            Some("null"),
            Some("http://evil.example"),
            Some("http://127.0.0.1:9999"),
            Some("https://127.0.0.1:8385"),
        ] {
            let r = RequestFacts { origin, ..ours };
            assert_eq!(g.check(&r), Err(Refusal::Origin), "{origin:?}");
        }
        let by_url = RequestFacts {
            cookie: None,
            query_token: Some(TOKEN),
            ..ours
        };
        assert_eq!(g.check(&by_url), Err(Refusal::BadToken));
        // A cross-origin read (fetch from another page) is refused too.
        let read = RequestFacts {
            origin: Some("http://evil.example"),
            cookie: Some(&cookie),
            ..page()
        };
        assert_eq!(g.check(&read), Err(Refusal::Origin));
    }

    #[test]
    fn the_csrf_token_is_checked_and_differs_from_the_access_token() {
        let g = guard();
        assert_ne!(g.csrf(), TOKEN);
        assert_eq!(g.csrf().len(), 64);
        assert_eq!(g.check_csrf(Some(g.csrf())), Ok(()));
        assert_eq!(g.check_csrf(None), Err(Refusal::Csrf));
        assert_eq!(g.check_csrf(Some(TOKEN)), Err(Refusal::Csrf));
        assert_eq!(g.check_csrf(Some("")), Err(Refusal::Csrf));
    }

    #[test]
    fn oversized_headers_are_refused_unread() {
        let g = guard();
        let huge = "a".repeat(MAX_HEADER + 1);
        let r = RequestFacts {
            host: Some(&huge),
            ..page()
        };
        assert_eq!(g.check(&r), Err(Refusal::Host));
        let r = RequestFacts {
            cookie: Some(&huge),
            ..page()
        };
        assert_eq!(g.check(&r), Err(Refusal::NoToken));
    }
}
