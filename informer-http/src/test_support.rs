//! What informer-http's unit tests share: [`Scripted`], a [`Backend`] that answers each
//! request with the next scripted answer (status, headers, body chunks, a transport failure at
//! the end or instead) and records the requests it was sent; and [`run`], a current-thread
//! tokio runtime to drive a future.
//!
//! Self-contained: it names only the crate-root re-exports and the backend's response type
//! (the `use` lines below), so it moves with whatever layout the crate takes.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Mutex, MutexGuard};

use bytes::Bytes;
use futures_util::stream;
use informer_core::protocol::Failure;

use crate::backend::HttpResponse;
use crate::{Backend, Client, Config};

/// One scripted HTTP response.
pub(crate) struct Canned {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub chunks: Vec<Vec<u8>>,
    /// End the body with a transport error after the chunks.
    pub fail_after: Option<Failure>,
}

impl Canned {
    /// `status` with `body` in one chunk.
    pub fn new(status: u16, body: impl Into<Vec<u8>>) -> Canned {
        Canned {
            status,
            headers: Vec::new(),
            chunks: vec![body.into()],
            fail_after: None,
        }
    }

    /// 200 with the body in these chunks.
    pub fn chunks(chunks: Vec<&str>) -> Canned {
        Canned {
            status: 200,
            headers: Vec::new(),
            chunks: chunks.into_iter().map(|c| c.as_bytes().to_vec()).collect(),
            fail_after: None,
        }
    }

    /// Adds a header.
    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Canned {
        self.headers.push((name, value.into()));
        self
    }
}

/// A backend answering each request with the next scripted answer (a response, or a failure
/// to send); a request beyond the script panics. Every request is recorded.
#[derive(Default)]
pub(crate) struct Scripted {
    answers: Mutex<VecDeque<Result<Canned, Failure>>>,
    seen: Mutex<Vec<http::Request<Bytes>>>,
}

impl Scripted {
    /// A backend giving these answers in order.
    pub fn new(answers: impl IntoIterator<Item = Result<Canned, Failure>>) -> Scripted {
        Scripted {
            answers: Mutex::new(answers.into_iter().collect()),
            seen: Mutex::default(),
        }
    }

    /// A client of `https://example:6443` (`config` adjusts the rest) over these answers.
    pub fn client(
        answers: impl IntoIterator<Item = Result<Canned, Failure>>,
        config: impl FnOnce(&mut Config),
    ) -> Client<Scripted> {
        let mut cfg = Config::new("https://example:6443");
        config(&mut cfg);
        Client::new(Scripted::new(answers), cfg)
    }

    /// The requests sent so far.
    pub fn seen(&self) -> MutexGuard<'_, Vec<http::Request<Bytes>>> {
        self.seen.lock().unwrap()
    }
}

impl Backend for Scripted {
    fn send(
        &self,
        request: http::Request<Bytes>,
    ) -> Pin<Box<dyn Future<Output = Result<HttpResponse, Failure>> + Send + '_>> {
        self.seen.lock().unwrap().push(request);
        let answer = self
            .answers
            .lock()
            .unwrap()
            .pop_front()
            .expect("unexpected request");
        Box::pin(async move {
            let c = answer?;
            let mut headers = http::HeaderMap::new();
            for (k, v) in c.headers {
                headers.insert(k, v.parse().unwrap());
            }
            let mut items: Vec<Result<Bytes, Failure>> =
                c.chunks.into_iter().map(|b| Ok(Bytes::from(b))).collect();
            if let Some(f) = c.fail_after {
                items.push(Err(f));
            }
            Ok(HttpResponse {
                status: http::StatusCode::from_u16(c.status).unwrap(),
                headers,
                body: Box::pin(stream::iter(items)),
            })
        })
    }
}

/// Drives `f` to completion on a current-thread tokio runtime.
pub(crate) fn run<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(f)
}
