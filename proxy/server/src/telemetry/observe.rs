//! [`observe`]: a front-end's request handler wrapped so that each request is
//! classified ([`crate::classify`]), its body bytes counted in and out, and its
//! answer recorded in [`Telemetry`] and, when the access log is on, in a line
//! of its own ([`super::access`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};

use super::access::Entry;
use super::{Api, Telemetry};

/// Which way a counted body goes.
#[derive(Debug, Clone, Copy)]
enum Dir {
    In,
    Out,
}

/// A body whose data bytes are added to the client byte counters as they pass.
pub struct Counted<B> {
    inner: B,
    /// `None`: not counted (answers made outside [`observe`], e.g. overload 503s).
    tel: Option<Arc<Telemetry>>,
    api: Api,
    dir: Dir,
    /// The request's access log entry (`None`: the access log is off).
    access: Option<Arc<Entry>>,
}

impl<B> Counted<B> {
    /// A body that is not counted (for answers made outside [`observe`]).
    pub fn uncounted(inner: B) -> Self {
        Self {
            inner,
            tel: None,
            api: Api::S3,
            dir: Dir::Out,
            access: None,
        }
    }
}

impl<B: Body<Data = Bytes> + Unpin> Body for Counted<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let r = Pin::new(&mut self.inner).poll_frame(cx);
        if let (Poll::Ready(Some(Ok(f))), Some(tel)) = (&r, &self.tel) {
            if let Some(d) = f.data_ref() {
                let n = d.len() as u64;
                let c = match self.dir {
                    Dir::In => &tel.bytes_in,
                    Dir::Out => &tel.bytes_out,
                };
                c[self.api.index()].fetch_add(n, Ordering::Relaxed);
                if let Some(a) = &self.access {
                    match self.dir {
                        Dir::In => &a.bytes_in,
                        Dir::Out => &a.bytes_out,
                    }
                    .fetch_add(n, Ordering::Relaxed);
                }
            }
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Decrements the in-flight gauge when the request ends, however it ends.
struct InFlight(Arc<Telemetry>, Api);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight[self.1.index()].fetch_sub(1, Ordering::Relaxed);
    }
}

fn content_length(h: &http::HeaderMap) -> u64 {
    h.get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The future of an observed request.
pub type Observed<B, E> =
    Pin<Box<dyn Future<Output = Result<http::Response<Counted<B>>, E>> + Send>>;

/// Wraps a front-end's handler: classifies each request, counts its body bytes,
/// and records its status and time to the answer's head (an error of the handler
/// itself counts as status 500); with `access_log`, writes its line of the access
/// log when it is over ([`super::access`]).
pub fn observe<H, F, B, E, I>(
    tel: Arc<Telemetry>,
    api: Api,
    access_log: bool,
    handler: H,
) -> impl Fn(http::Request<I>) -> Observed<B, E> + Clone + Send + Sync + 'static
where
    I: Send + 'static,
    H: Fn(http::Request<Counted<I>>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Result<http::Response<B>, E>> + Send + 'static,
    B: Body<Data = Bytes> + Unpin + Send + 'static,
    E: Send + 'static,
{
    move |req: http::Request<I>| {
        let tel = tel.clone();
        let handler = handler.clone();
        Box::pin(async move {
            let started = Instant::now();
            let uri = req.uri();
            let c = match api {
                Api::S3 => {
                    let path =
                        crate::classify::s3_path_style(uri.path(), req.headers(), &tel.s3_domain);
                    crate::classify::s3(req.method(), &path, uri.query(), req.headers())
                }
                Api::Swift => {
                    crate::classify::swift(req.method(), uri.path(), uri.query(), req.headers())
                }
            };
            let req_len = content_length(req.headers());
            let access = access_log.then(|| Arc::new(Entry::new(api, &req, c.op)));
            tel.in_flight[api.index()].fetch_add(1, Ordering::Relaxed);
            let _guard = InFlight(tel.clone(), api);
            let req = req.map(|b| Counted {
                inner: b,
                tel: Some(tel.clone()),
                api,
                dir: Dir::In,
                access: access.clone(),
            });
            match handler(req).await {
                Ok(resp) => {
                    let size = if c.read {
                        content_length(resp.headers())
                    } else {
                        req_len
                    };
                    tel.record(api, &c, resp.status().as_u16(), size, started);
                    if let Some(a) = &access {
                        a.answered(&resp);
                    }
                    let tel2 = tel.clone();
                    Ok(resp.map(|b| Counted {
                        inner: b,
                        tel: Some(tel2),
                        api,
                        dir: Dir::Out,
                        access,
                    }))
                }
                Err(e) => {
                    tel.record(api, &c, 500, req_len, started);
                    if let Some(a) = &access {
                        a.failed();
                    }
                    Err(e)
                }
            }
        }) as Observed<B, E>
    }
}
