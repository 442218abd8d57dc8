//! Redirects, the same way on every backend: followed only within the configured server's
//! origin (scheme, host and port), at most [`MAX_REDIRECTS`] times, with the request's
//! credentials kept. A redirect elsewhere is not followed (credentials are never sent to
//! another origin): the request fails with `Failure::Redirect`, reason [`REASON_REDIRECT_TO_OTHER_ORIGIN`]; too
//! long a chain fails with reason [`REASON_TOO_MANY_REDIRECTS`].
//!
//! kube-apiserver itself does not redirect; proxies and load balancers in front of it can.

use informer_core::protocol::{Failure, Status};

/// Most redirects followed for one request (as reqwest's and Go's default limit).
pub const MAX_REDIRECTS: usize = 10;

/// The `reason` of the [`Failure::Redirect`] for a redirect to another origin: not followed.
pub const REASON_REDIRECT_TO_OTHER_ORIGIN: &str = "RedirectToOtherOrigin";

/// The `reason` of the [`Failure::Redirect`] for a request redirected more than
/// [`MAX_REDIRECTS`] times.
pub const REASON_TOO_MANY_REDIRECTS: &str = "TooManyRedirects";

/// Whether `status` is a redirect that carries a `Location` to follow.
pub fn is_redirect(status: http::StatusCode) -> bool {
    matches!(status.as_u16(), 301 | 302 | 303 | 307 | 308)
}

/// The method and whether the body is sent again after a redirect with `status`: a 303, and a
/// 301 or 302 answering a POST, turn the request into a GET without body (as browsers, Go and
/// reqwest do); 307 and 308 repeat it as it was.
pub fn method_after(status: http::StatusCode, method: &http::Method) -> (http::Method, bool) {
    let to_get = match status.as_u16() {
        303 => *method != http::Method::HEAD,
        301 | 302 => *method == http::Method::POST,
        _ => false,
    };
    if to_get {
        (http::Method::GET, false)
    } else {
        (method.clone(), true)
    }
}

/// A URL's origin: scheme, host and port.
#[derive(Clone, Debug)]
pub struct Origin {
    /// `https` (else `http`).
    pub tls: bool,
    /// The host, IPv6 without brackets.
    pub host: String,
    /// The port, the scheme's default when the URL gives none.
    pub port: u16,
}

impl Origin {
    /// The origin of an absolute `http`/`https` URI, `None` for anything else.
    pub fn of(uri: &http::Uri) -> Option<Origin> {
        let tls = match uri.scheme_str()? {
            s if s.eq_ignore_ascii_case("https") => true,
            s if s.eq_ignore_ascii_case("http") => false,
            _ => return None,
        };
        let host = uri.host().filter(|h| !h.is_empty())?;
        Some(Origin {
            tls,
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_ascii_lowercase(),
            port: uri.port_u16().unwrap_or(if tls { 443 } else { 80 }),
        })
    }
}

impl PartialEq for Origin {
    fn eq(&self, other: &Origin) -> bool {
        self.tls == other.tls
            && self.port == other.port
            && self.host.eq_ignore_ascii_case(&other.host)
    }
}

impl Eq for Origin {}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = if self.tls { "https" } else { "http" };
        if self.host.contains(':') {
            write!(f, "{scheme}://[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{scheme}://{}:{}", self.host, self.port)
        }
    }
}

/// The failure for a redirect (answer `status`) to `target`, another origin. Names the origin
/// only: the path and query of the `Location` may carry tokens.
pub fn other_origin(status: http::StatusCode, target: &str) -> Failure {
    Failure::Redirect(Status {
        code: status.as_u16(),
        reason: REASON_REDIRECT_TO_OTHER_ORIGIN.to_string(),
        message: format!(
            "the server redirected (HTTP {}) to another origin, {target}: not followed, \
             credentials are only sent to the configured server",
            status.as_u16()
        ),
        ..Status::default()
    })
}

/// The failure for a redirect (answer `status`) past [`MAX_REDIRECTS`].
pub fn too_many(status: http::StatusCode) -> Failure {
    Failure::Redirect(Status {
        code: status.as_u16(),
        reason: REASON_TOO_MANY_REDIRECTS.to_string(),
        message: format!("more than {MAX_REDIRECTS} redirects"),
        ..Status::default()
    })
}

/// Where a `Location` leads from the request `current` (an absolute URI): its origin and the
/// path and query to ask there. `None` when it is unusable (the redirect answer is then
/// returned as it is).
pub fn resolve(current: &http::Uri, location: &str) -> Option<(Origin, String)> {
    let location = location.trim();
    let location = location.split('#').next().unwrap_or("");
    let here = Origin::of(current)?;
    let absolute = if location.starts_with("//") {
        let scheme = if here.tls { "https:" } else { "http:" };
        format!("{scheme}{location}")
    } else if location.starts_with('/') || location.is_empty() {
        // Same origin; an empty Location is the current URL.
        let pq = if location.is_empty() {
            current.path_and_query().map_or("/", |p| p.as_str())
        } else {
            location
        };
        pq.parse::<http::uri::PathAndQuery>().ok()?;
        return Some((here, pq.to_string()));
    } else if has_scheme(location) {
        location.to_string()
    } else {
        // Relative to the current path's directory.
        let path = current.path();
        let dir = &path[..path.rfind('/').map_or(0, |i| i + 1)];
        let pq = format!("{}{location}", if dir.is_empty() { "/" } else { dir });
        pq.parse::<http::uri::PathAndQuery>().ok()?;
        return Some((here, pq));
    };
    let uri: http::Uri = absolute.parse().ok()?;
    let origin = Origin::of(&uri)?;
    let pq = uri.path_and_query().map_or("/", |p| p.as_str());
    let pq = if pq.is_empty() { "/" } else { pq };
    Some((origin, pq.to_string()))
}

/// Whether `s` starts with a URI scheme (`letter *( letter / digit / "+" / "-" / "." ) ":"`).
fn has_scheme(s: &str) -> bool {
    let Some((scheme, _)) = s.split_once(':') else {
        return false;
    };
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_resolve_against_the_request() {
        let cur: http::Uri = "http://127.0.0.1:8001/api/v1/pods?limit=1".parse().unwrap();
        let here = Origin::of(&cur).unwrap();
        let r = |l: &str| resolve(&cur, l).map(|(o, pq)| (o.to_string(), pq));
        assert_eq!(
            r("/apis/x?y=1#frag"),
            Some((here.to_string(), "/apis/x?y=1".into()))
        );
        assert_eq!(r("pods2"), Some((here.to_string(), "/api/v1/pods2".into())));
        assert_eq!(
            r("HTTP://127.0.0.1:8001/z"),
            Some(("http://127.0.0.1:8001".into(), "/z".into()))
        );
        assert_eq!(
            r("//127.0.0.1:8001"),
            Some(("http://127.0.0.1:8001".into(), "/".into()))
        );
        assert_eq!(
            r("https://127.0.0.1:8001/"),
            Some(("https://127.0.0.1:8001".into(), "/".into()))
        );
        assert_eq!(
            r("http://[::1]/"),
            Some(("http://[::1]:80".into(), "/".into()))
        );
        assert_eq!(r("ftp://x/"), None);
        assert_eq!(r("http://"), None);
        // The origin: scheme, host (any case) and port.
        let o = |s: &str| Origin::of(&s.parse().unwrap()).unwrap();
        assert_eq!(o("http://Example.COM/a"), o("http://example.com:80/b"));
        assert_ne!(o("http://example.com"), o("https://example.com"));
        assert_ne!(o("http://example.com"), o("http://example.com:8080"));
        assert_ne!(o("http://example.com"), o("http://example.org"));
    }

    #[test]
    fn methods_after_a_redirect() {
        use http::{Method, StatusCode};
        let s = |c| StatusCode::from_u16(c).unwrap();
        assert_eq!(method_after(s(302), &Method::GET), (Method::GET, true));
        assert_eq!(method_after(s(302), &Method::POST), (Method::GET, false));
        assert_eq!(method_after(s(303), &Method::PUT), (Method::GET, false));
        assert_eq!(method_after(s(307), &Method::POST), (Method::POST, true));
        assert_eq!(
            method_after(s(308), &Method::DELETE),
            (Method::DELETE, true)
        );
        assert!(is_redirect(s(301)) && !is_redirect(s(304)) && !is_redirect(s(300)));
    }
}
