//! Redirects behave the same on both backends: followed within the server's origin (scheme,
//! host, port) with the credentials kept, at most ten times; a redirect to another origin is
//! not followed — nothing is sent there — and fails with a typed reason.

mod support;

use informer_http::config::{Auth, Secret};
use informer_http::core::protocol::Failure;
use informer_http::net::redirect::{REASON_REDIRECT_TO_OTHER_ORIGIN, REASON_TOO_MANY_REDIRECTS};
use informer_http::{Backend, Client, Config};
use support::{Server, response, serve, tokio_run};

const TOKEN: &str = "redirect-test-token";

/// The server's script. `other` is the port of another server, which nobody may contact.
fn script(other: u16) -> impl Fn(u16, &str) -> Vec<u8> + Send + Sync + 'static {
    move |port, path| {
        let to =
            |status: &str, location: String| response(status, &[("Location", &location)], "moved");
        match path {
            "/relative" => to("302 Found", "/landed?via=relative".into()),
            "/absolute" => to(
                "307 Temporary Redirect",
                format!("http://127.0.0.1:{port}/landed"),
            ),
            "/twice" => to("301 Moved Permanently", "/relative".into()),
            "/other-port" => to(
                "302 Found",
                format!("http://127.0.0.1:{other}/steal?token=x"),
            ),
            "/other-host" => to("302 Found", format!("http://localhost:{port}/landed")),
            "/other-scheme" => to(
                "308 Permanent Redirect",
                format!("https://127.0.0.1:{port}/landed"),
            ),
            p if p.starts_with("/loop/") => {
                let n: u32 = p["/loop/".len()..].parse().unwrap();
                to("302 Found", format!("/loop/{}", n + 1))
            }
            p if p.starts_with("/landed") => response("200 OK", &[], "landed"),
            _ => response("404 Not Found", &[], "nope"),
        }
    }
}

async fn get<B: Backend>(client: &Client<B>, path: &str) -> Result<(u16, Vec<u8>), Failure> {
    let resp = client.send(http::Method::GET, path, None).await?;
    let status = resp.status.as_u16();
    Ok((status, resp.collect(1 << 20).await?))
}

/// Runs every case against `client`, talking to `server`; `other` must stay untouched.
async fn cases<B: Backend>(name: &str, client: &Client<B>, server: &Server, other: &Server) {
    let other_port = other.port;
    let before = server.requests().len();
    // Same origin, relative, absolute and chained: followed, the credentials kept.
    for path in ["/relative", "/absolute", "/twice"] {
        let r = get(client, path).await;
        assert_eq!(r, Ok((200, b"landed".to_vec())), "[{name}] {path}");
    }
    let seen = &server.requests()[before..];
    let paths: Vec<&str> = seen.iter().map(|s| s.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/relative",
            "/landed?via=relative",
            "/absolute",
            "/landed",
            "/twice",
            "/relative",
            "/landed?via=relative"
        ],
        "[{name}]"
    );
    let bearer = format!("Bearer {TOKEN}");
    assert!(
        seen.iter()
            .all(|s| s.authorization.as_deref() == Some(bearer.as_str())),
        "[{name}] {seen:?}"
    );

    // Another origin: not followed, a typed failure naming the origin (not the path).
    for (path, code, target) in [
        ("/other-port", 302, format!("127.0.0.1:{other_port}")),
        ("/other-host", 302, format!("localhost:{}", server.port)),
        (
            "/other-scheme",
            308,
            format!("https://127.0.0.1:{}", server.port),
        ),
    ] {
        let before = server.requests().len();
        let f = get(client, path).await.unwrap_err();
        let Failure::Redirect(s) = &f else {
            panic!("[{name}] {path}: {f:?}")
        };
        assert_eq!(
            (s.code, s.reason.as_str()),
            (code, REASON_REDIRECT_TO_OTHER_ORIGIN),
            "[{name}] {path}: {f:?}"
        );
        assert!(
            s.message.contains(&target) && !s.message.contains("steal"),
            "[{name}] {path}: {}",
            s.message
        );
        // Only the redirecting request reached the server.
        assert_eq!(server.requests().len(), before + 1, "[{name}] {path}");
    }
    assert!(
        other.requests().is_empty(),
        "[{name}] the other origin was asked {:?}",
        other.requests()
    );

    // A redirect loop: ten redirects followed, then a typed failure.
    let before = server.requests().len();
    let f = get(client, "/loop/0").await.unwrap_err();
    assert!(
        matches!(&f, Failure::Redirect(s) if s.reason == REASON_TOO_MANY_REDIRECTS && s.code == 302),
        "[{name}] {f:?}"
    );
    let loops: Vec<String> = server.requests()[before..]
        .iter()
        .map(|s| s.path.clone())
        .collect();
    assert_eq!(
        loops,
        (0..=10).map(|n| format!("/loop/{n}")).collect::<Vec<_>>(),
        "[{name}]"
    );
}

fn config(port: u16) -> Config {
    let mut cfg = Config::new(format!("http://127.0.0.1:{port}"));
    cfg.auth = Auth::Token(Secret::new(TOKEN.into()));
    cfg
}

/// Another origin, which answers anything (a backend following a redirect there gets an answer,
/// and the test fails rather than waits).
fn other_origin() -> Server {
    serve(None, |_, _| response("200 OK", &[], "stolen"))
}

#[test]
fn reqwest_follows_redirects_only_within_the_origin() {
    let other = other_origin();
    let server = serve(None, script(other.port));
    let client = Client::reqwest(config(server.port)).unwrap();
    tokio_run(cases("reqwest", &client, &server, &other));
}

#[test]
fn smol_follows_redirects_only_within_the_origin() {
    let other = other_origin();
    let server = serve(None, script(other.port));
    let client = Client::smol(config(server.port)).unwrap();
    smol::block_on(cases("smol", &client, &server, &other));
}
