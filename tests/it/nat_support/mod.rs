//! A small Internet with home routers, built from Linux network namespaces for the
//! NAT-traversal tests, and removed again when dropped (also when a test panics).
//!
//! Layout (`<id>` is unique per run, so parallel runs never meet):
//!
//! ```text
//!  gln<id>-inet: bridge br0 198.51.100.1/24 (the relay runs here)
//!     |-- veth --> gln<id>-r<h>: router, wan 198.51.100.<10*(h+1)>/24, lan 192.168.<10*(h+1)>.1/24
//!                      |-- veth --> gln<id>-h<h>: home, eth0 192.168.<10*(h+1)>.2/24, default via .1
//! ```
//!
//! Nothing is connected to the machine's own namespace: whatever runs inside can only
//! reach the other namespaces. Each router masquerades its LAN onto the bridge with
//! nftables and, like a home router, drops unsolicited packets from the Internet side
//! (silently: a RST would spoil TCP hole punching). The NAT kinds differ only in the
//! masquerade rule:
//!
//! - `Nat::Cone`: `masquerade`. Linux keeps the LAN source port when it is free, so
//!   one LAN socket keeps one public port for every destination (endpoint-independent
//!   mapping); conntrack admits replies only from the address and port a packet went
//!   to (address-and-port-dependent filtering): a port-restricted cone.
//! - `Nat::Symmetric`: `masquerade fully-random`. Every new connection (5-tuple) gets
//!   a random public port, so the port a peer observed via the relay is not the port
//!   a new connection to another peer uses (address-and-port-dependent mapping).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

/// The relay's address on the Internet bridge.
pub const RELAY_IP: &str = "198.51.100.1";

/// How a home router maps its LAN onto the Internet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nat {
    /// Endpoint-independent mapping, address-and-port-dependent filtering.
    Cone,
    /// Address-and-port-dependent mapping (a random port per connection).
    Symmetric,
}

impl Nat {
    fn masquerade(self) -> &'static str {
        match self {
            Nat::Cone => "masquerade",
            Nat::Symmetric => "masquerade fully-random",
        }
    }
}

/// Why the topology cannot be built on this machine, proven by trying.
#[derive(Debug)]
pub struct Unsupported(pub String);

/// Runs `program args`, returning stdout or an error naming the command and its stderr.
pub fn run(program: &str, args: &[&str]) -> Result<String, String> {
    run_with_input(program, args, None)
}

fn run_with_input(program: &str, args: &[&str], input: Option<&str>) -> Result<String, String> {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("{program} {}: {e}", args.join(" ")))?;
    if let Some(text) = input {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("piped stdin");
        stdin
            .write_all(text.as_bytes())
            .map_err(|e| format!("{program}: writing stdin: {e}"))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("{program} {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{program} {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn tool_present(name: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(name).is_file()))
        || ["/usr/sbin", "/sbin", "/usr/bin"]
            .iter()
            .any(|d| Path::new(d).join(name).is_file())
}

/// A run id short enough for namespace names: pid and clock bits, in hex.
fn run_id() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "{:05x}",
        (std::process::id() ^ nanos.rotate_left(7)) & 0xf_ffff
    )
}

/// Proves the machine can host the topology: `ip` and `nft` are installed and a
/// network namespace can be created (root or CAP_NET_ADMIN) and given an nftables
/// table. Returns why not, naming the missing part.
pub fn probe() -> Result<(), Unsupported> {
    for tool in ["ip", "nft"] {
        if !tool_present(tool) {
            return Err(Unsupported(format!(
                "`{tool}` is not installed (iproute2 / nftables; .ci/run installs them)"
            )));
        }
    }
    let name = format!("gln{}-probe", run_id());
    run("ip", &["netns", "add", &name]).map_err(|e| {
        Unsupported(format!(
            "cannot create a network namespace (needs root or CAP_NET_ADMIN): {e}"
        ))
    })?;
    let nft = run(
        "ip",
        &["netns", "exec", &name, "nft", "add", "table", "ip", "probe"],
    );
    let _ = run("ip", &["netns", "del", &name]);
    nft.map_err(|e| Unsupported(format!("nftables does not work in a namespace: {e}")))?;
    Ok(())
}

/// The namespaces of one run; dropping it deletes them (and with them every veth,
/// bridge, address and nftables table inside).
pub struct Topology {
    pub id: String,
    namespaces: Vec<String>,
}

impl Topology {
    /// Builds the Internet bridge and one router and home per entry of `homes`.
    /// On error, what was built so far is removed (by the drop of the half-built value).
    pub fn build(homes: &[Nat]) -> Result<Topology, String> {
        let mut t = Topology {
            id: run_id(),
            namespaces: Vec::new(),
        };
        let inet = t.add_namespace("inet")?;
        ip(&inet, "link add br0 type bridge")?;
        ip(&inet, &format!("addr add {RELAY_IP}/24 dev br0"))?;
        ip(&inet, "link set br0 up")?;
        for (h, nat) in homes.iter().enumerate() {
            let router = t.add_namespace(&format!("r{h}"))?;
            let home = t.add_namespace(&format!("h{h}"))?;
            let n = 10 * (h + 1);
            ip(
                &inet,
                &format!("link add p{h} type veth peer name wan netns {router}"),
            )?;
            ip(&inet, &format!("link set p{h} master br0 up"))?;
            ip(&router, &format!("addr add 198.51.100.{n}/24 dev wan"))?;
            ip(&router, "link set wan up")?;
            ip(
                &router,
                &format!("link add lan type veth peer name eth0 netns {home}"),
            )?;
            ip(&router, &format!("addr add 192.168.{n}.1/24 dev lan"))?;
            ip(&router, "link set lan up")?;
            run(
                "ip",
                &[
                    "netns",
                    "exec",
                    &router,
                    "sysctl",
                    "-qw",
                    "net.ipv4.ip_forward=1",
                ],
            )?;
            ip(&home, &format!("addr add 192.168.{n}.2/24 dev eth0"))?;
            ip(&home, "link set eth0 up")?;
            ip(&home, &format!("route add default via 192.168.{n}.1"))?;
            let rules = format!(
                "table ip gleaner_nat {{
  chain postrouting {{ type nat hook postrouting priority srcnat; policy accept;
    oifname \"wan\" {masq}; }}
  chain input {{ type filter hook input priority filter; policy accept;
    iifname \"wan\" ct state established,related accept;
    iifname \"wan\" drop; }}
  chain forward {{ type filter hook forward priority filter; policy accept;
    iifname \"wan\" ct state established,related accept;
    iifname \"wan\" drop; }}
}}
",
                masq = nat.masquerade()
            );
            run_with_input(
                "ip",
                &["netns", "exec", &router, "nft", "-f", "-"],
                Some(&rules),
            )?;
        }
        Ok(t)
    }

    fn add_namespace(&mut self, suffix: &str) -> Result<String, String> {
        let name = format!("gln{}-{suffix}", self.id);
        run("ip", &["netns", "add", &name])?;
        self.namespaces.push(name.clone());
        ip(&name, "link set lo up")?;
        Ok(name)
    }

    /// The namespace the relay runs in.
    pub fn internet(&self) -> String {
        format!("gln{}-inet", self.id)
    }

    /// The namespace of home `h`'s LAN.
    pub fn home(&self, h: usize) -> String {
        format!("gln{}-h{h}", self.id)
    }

    /// The namespace of home `h`'s router.
    pub fn router(&self, h: usize) -> String {
        format!("gln{}-r{h}", self.id)
    }

    /// Forgets every NAT mapping of home `h`'s router (as a router reboot or a
    /// mapping timeout would): established connections through it lose their port.
    pub fn flush_nat(&self, h: usize) -> Result<(), String> {
        let router = self.router(h);
        run("ip", &["netns", "exec", &router, "conntrack", "-F"]).map(|_| ())
    }

    /// The router's nftables ruleset, for failure messages.
    pub fn ruleset(&self, h: usize) -> String {
        run(
            "ip",
            &["netns", "exec", &self.router(h), "nft", "list", "ruleset"],
        )
        .unwrap_or_else(|e| e)
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        // Deleting a namespace removes its interfaces (a veth pair goes with either
        // end) and its nftables tables; processes must be gone first (the node
        // fixtures are declared after the topology, so they drop before it).
        for ns in self.namespaces.iter().rev() {
            if let Err(e) = run("ip", &["netns", "del", ns]) {
                eprintln!("nat topology: cannot remove {ns}: {e}");
            }
        }
    }
}

fn ip(ns: &str, args: &str) -> Result<String, String> {
    let mut all = vec!["-n", ns];
    all.extend(args.split_whitespace());
    run("ip", &all)
}
