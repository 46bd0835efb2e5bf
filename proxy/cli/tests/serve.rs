//! `oram-proxy serve` as a process, with real requests over HTTP: the access log
//! (one line per request, no secret in it) and `oram-proxy stats` naming the
//! Swift containers S3 cannot address.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;

const ACCESS_KEY: &str = "accesslog";
const SECRET_KEY: &str = "secret-key-never-logged-7Qx";
/// Signatures sent by the S3 requests below: they must not reach the log.
const PRESIGNED_SIG: &str = "5ee1c0ffee5ee1c0ffee5ee1c0ffee5ee1c0ffee5ee1c0ffee5ee1c0ffee5ee1";
const HEADER_SIG: &str = "badc0ffeebadc0ffeebadc0ffeebadc0ffeebadc0ffeebadc0ffeebadc0ffee";

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_oram-proxy")
}

/// One HTTP/1.1 request on a fresh connection; the status, the head and the body.
fn http(addr: &str, head: &str, body: &[u8]) -> (u16, String, Vec<u8>) {
    let mut s = TcpStream::connect(addr).expect("connect");
    let req = format!(
        "{head}\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("an HTTP answer");
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, head, raw[split + 4..].to_vec())
}

/// The value of header `name` in an answer's head.
fn header(head: &str, name: &str) -> String {
    head.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
        .unwrap_or_else(|| panic!("no {name} in {head}"))
}

/// The serving proxy: its process, its banner's addresses, and its standard
/// error as it is read.
struct Served {
    child: Child,
    s3: String,
    swift: String,
    metrics: String,
    stderr: std::thread::JoinHandle<String>,
}

fn serve(data: &std::path::Path) -> Served {
    let mut child = Command::new(bin())
        .args(["serve", "--data-dir"])
        .arg(data)
        .args([
            "--s3-listen",
            "127.0.0.1:0",
            "--swift-listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
            "--capacity-blocks",
            "1024",
            "--block-size",
            "4096",
            "--no-fsync",
            "--access-log",
        ])
        .env("ORAM_PROXY_ROOT_USER", ACCESS_KEY)
        .env("ORAM_PROXY_ROOT_PASSWORD", SECRET_KEY)
        .env("RUST_LOG", "info")
        .env_remove("ORAM_PROXY_MASTER_KEY")
        .env_remove("ORAM_PROXY_PASSPHRASE")
        .env_remove("CREDENTIALS_DIRECTORY")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("oram-proxy serve starts");
    // Standard error is drained all along (a full pipe would stall the proxy).
    let mut err = child.stderr.take().unwrap();
    let stderr = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let (mut s3, mut swift, mut metrics) = (None, None, None);
    // The banner ends with the data directory's lines; the loop ends at the
    // banner's end or when the proxy exits (its standard output closes).
    for line in rx.iter() {
        let addr = |l: &str| {
            l.split("http://")
                .nth(1)
                .map(|r| r.split(['/', ' ']).next().unwrap().to_string())
        };
        let t = line.trim_start();
        if t.starts_with("endpoint:") {
            s3 = addr(t);
        } else if t.starts_with("swift auth:") {
            swift = addr(t);
        } else if t.starts_with("metrics:") {
            metrics = addr(t);
        } else if t.starts_with("secret key:") {
            break;
        }
    }
    let missing = || -> String { panic!("no banner from oram-proxy serve") };
    Served {
        s3: s3.unwrap_or_else(missing),
        swift: swift.unwrap_or_else(missing),
        metrics: metrics.unwrap_or_else(missing),
        child,
        stderr,
    }
}

impl Served {
    /// Stops the proxy with SIGTERM (it finishes its requests) and returns its
    /// standard error.
    fn stop(mut self) -> String {
        let pid = self.child.id().to_string();
        let killed = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(killed.success());
        let status = self.child.wait().unwrap();
        let err = self.stderr.join().unwrap();
        assert!(status.success(), "{status:?}\n{err}");
        err
    }
}

#[test]
fn the_access_log_has_every_request_and_no_secret_and_stats_names_invisible_containers() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let p = serve(&data);
    let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // Swift: a login, a container S3 cannot address, an object in and out.
        let (status, head, _) = http(
            &p.swift,
            &format!(
                "GET /auth/v1.0 HTTP/1.1\r\nX-Auth-User: {ACCESS_KEY}:{ACCESS_KEY}\r\n\
                 X-Auth-Key: {SECRET_KEY}"
            ),
            b"",
        );
        assert_eq!(status, 200, "{head}");
        let token = header(&head, "x-auth-token");
        let base = format!("/v1/AUTH_{ACCESS_KEY}/My_Container");
        let auth = format!("X-Auth-Token: {token}");
        let (status, head, _) = http(&p.swift, &format!("PUT {base} HTTP/1.1\r\n{auth}"), b"");
        assert_eq!(status, 201, "{head}");
        let (status, head, _) = http(
            &p.swift,
            &format!("PUT {base}/obj HTTP/1.1\r\n{auth}"),
            b"hello",
        );
        assert_eq!(status, 201, "{head}");
        let (status, head, body) =
            http(&p.swift, &format!("GET {base}/obj HTTP/1.1\r\n{auth}"), b"");
        assert_eq!((status, body.as_slice()), (200, &b"hello"[..]), "{head}");
        // S3: a presigned URL and a signed request, both with a wrong signature.
        let (status, head, _) = http(
            &p.s3,
            &format!(
                "GET /some-bucket?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=\
                 {ACCESS_KEY}%2F20260101%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=\
                 20260101T000000Z&X-Amz-Expires=60&X-Amz-SignedHeaders=host&\
                 X-Amz-Signature={PRESIGNED_SIG} HTTP/1.1"
            ),
            b"",
        );
        assert_eq!(status, 403, "{head}");
        let (status, head, _) = http(
            &p.s3,
            &format!(
                "GET /some-bucket HTTP/1.1\r\nX-Amz-Date: 20260101T000000Z\r\n\
                 X-Amz-Content-Sha256: UNSIGNED-PAYLOAD\r\nAuthorization: AWS4-HMAC-SHA256 \
                 Credential={ACCESS_KEY}/20260101/us-east-1/s3/aws4_request, \
                 SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature={HEADER_SIG}"
            ),
            b"",
        );
        assert_eq!(status, 403, "{head}");
        // The list needs the endpoint's token.
        let (status, head, _) = http(&p.metrics, "GET /buckets/invisible HTTP/1.1", b"");
        assert_eq!(status, 401, "{head}");
        // `stats` names the container S3 does not list, with the reason.
        let out = Command::new(bin())
            .args(["stats", "--data-dir"])
            .arg(&data)
            .args(["--metrics-listen", &p.metrics])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{out:?}");
        assert!(
            text.contains(&format!(
                "\"My_Container\" (account AUTH_{ACCESS_KEY}): not a valid S3 bucket name: \
                 uppercase letters"
            )),
            "{text}"
        );
        assert!(
            text.contains("1 Swift container(s) invisible to S3"),
            "{text}"
        );
        token
    }));
    let log = p.stop();
    let token = served.unwrap_or_else(|e| std::panic::resume_unwind(e));
    // With the proxy stopped, `stats` reads the data directory: the same name.
    let out = Command::new(bin())
        .args(["stats", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("no proxy running"),
        "{out:?}"
    );
    assert!(
        text.contains(&format!(
            "invisible:     \"My_Container\" (account AUTH_{ACCESS_KEY}): not a valid S3 \
             bucket name: uppercase letters"
        )),
        "{text}"
    );
    let access: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("oram_proxy::access"))
        .collect();
    let line = |what: &[&str]| {
        access
            .iter()
            .find(|l| what.iter().all(|w| l.contains(w)))
            .unwrap_or_else(|| panic!("no access line with {what:?} in\n{log}"))
    };
    let user = format!("user=\"{ACCESS_KEY}:{ACCESS_KEY}\"");
    let login = line(&["api=\"swift\"", "path=/auth/v1.0", "status=200", &user]);
    assert!(
        login.contains("method=GET") && login.contains("remote=127.0.0.1:"),
        "{login}"
    );
    line(&[
        "method=PUT",
        "path=/v1/AUTH_accesslog/My_Container ",
        "status=201",
        &user,
    ]);
    let put = line(&[
        "method=PUT",
        "path=/v1/AUTH_accesslog/My_Container/obj",
        "status=201",
    ]);
    assert!(put.contains("bytes_in=5 "), "{put}");
    let get = line(&[
        "method=GET",
        "path=/v1/AUTH_accesslog/My_Container/obj",
        "status=200",
    ]);
    assert!(
        get.contains("bytes_out=5 ") && get.contains("request_id=\"tx"),
        "{get}"
    );
    let s3 = access
        .iter()
        .filter(|l| l.contains("api=\"s3\"") && l.contains("path=/some-bucket "))
        .collect::<Vec<_>>();
    assert_eq!(s3.len(), 2, "{log}");
    for l in s3 {
        assert!(
            l.contains("status=403")
                && l.contains("user=\"accesslog\" ")
                && l.contains("method=GET"),
            "{l}"
        );
        assert!(!l.contains("request_id=\"-\""), "{l}");
    }
    // Nothing secret anywhere in the log, access lines or not.
    for secret in [
        SECRET_KEY,
        &token,
        PRESIGNED_SIG,
        HEADER_SIG,
        "X-Amz-Signature",
    ] {
        assert!(!log.contains(secret), "{secret} in the log:\n{log}");
    }
}
