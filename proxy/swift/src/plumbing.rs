//! HTTP plumbing: the request as handlers see it ([`Ctx`]), the answer under
//! construction ([`Answer`]), bodies, and the common headers ([`finish`]).

use bytes::Bytes;
use futures::StreamExt;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Response, StatusCode};
use http_body_util::{BodyExt, BodyStream, Full, StreamBody};
use hyper::body::Frame;
use oram_objects::{ByteStream, ObjectError};
use rand::RngCore;

use crate::error::{err_msg, Res, SwiftError};
use crate::limits::*;
use crate::util::http_now;
use crate::SwiftBody;

/// The largest request body read whole before the request is routed
/// ([`read_small_body`]).
pub(crate) const SMALL_BODY: u64 = 64 * 1024;

/// How long a small body may take to arrive once its headers have.
const SMALL_BODY_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// A request body as routing sees it: read whole already, or still to read
/// (its errors as I/O errors).
pub(crate) type RoutedBody<B> = http_body_util::Either<
    Full<Bytes>,
    http_body_util::combinators::MapErr<B, fn(<B as http_body::Body>::Error) -> std::io::Error>,
>;

fn io_error<E: std::fmt::Display>(e: E) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

/// A request body of a declared length of at most [`SMALL_BODY`] bytes (no
/// `Transfer-Encoding`), read whole before the request is routed; any other
/// body is left to be read by its handler.
///
/// Why: a handler that refuses a request on its headers answers without
/// reading the body, and the connection is then closed with the body unread
/// — the kernel resets such a connection, and a client still sending a small
/// body may lose the answer (python's http.client saw "Remote end closed
/// connection without response" for a one-byte PUT refused with 400). Bounded:
/// at most [`SMALL_BODY`] bytes per request, within [`SMALL_BODY_WAIT`]; a body
/// that does not arrive in time, or is not the length declared, is a 400.
pub(crate) async fn read_small_body<B>(headers: &HeaderMap, body: B) -> Res<RoutedBody<B>>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: std::fmt::Display,
{
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let small = match declared {
        Some(n) => (1..=SMALL_BODY).contains(&n),
        None => false,
    };
    let body = body.map_err(io_error::<B::Error> as fn(B::Error) -> std::io::Error);
    if !small || headers.contains_key(header::TRANSFER_ENCODING) {
        return Ok(http_body_util::Either::Right(body));
    }
    let limited = http_body_util::Limited::new(body, SMALL_BODY as usize);
    match tokio::time::timeout(SMALL_BODY_WAIT, limited.collect()).await {
        Ok(Ok(c)) => Ok(http_body_util::Either::Left(Full::new(c.to_bytes()))),
        Ok(Err(_)) | Err(_) => Err(err_msg(400, "The request body was not received in full")),
    }
}

pub(crate) fn full(b: impl Into<Bytes>) -> SwiftBody {
    Full::new(b.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

pub(crate) fn stream_body(s: ByteStream) -> SwiftBody {
    StreamBody::new(s.map(|r| {
        r.map(Frame::data)
            .map_err(|e| std::io::Error::other(e.to_string()))
    }))
    .boxed_unsync()
}

/// Turns a request body into the object layer's stream.
pub(crate) fn body_stream<B>(body: B) -> ByteStream
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: std::fmt::Display,
{
    Box::pin(
        BodyStream::new(body)
            .map(|f| match f {
                Ok(frame) => frame.into_data().ok().map(Ok),
                Err(e) => Some(Err(ObjectError::Body(e.to_string()))),
            })
            .filter_map(futures::future::ready),
    )
}

/// Reads the first chunk, so that an error before any byte becomes an error answer.
pub(crate) async fn prime(mut s: ByteStream) -> Result<ByteStream, ObjectError> {
    match s.next().await {
        None => Ok(Box::pin(futures::stream::empty())),
        Some(Err(e)) => Err(e),
        Some(Ok(first)) => Ok(Box::pin(
            futures::stream::once(async { Ok(first) }).chain(s),
        )),
    }
}

/// The request as the handlers see it.
pub(crate) struct Ctx {
    pub(crate) method: Method,
    pub(crate) headers: HeaderMap,
    pub(crate) query: Vec<(String, String)>,
}

impl Ctx {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// A header's value as UTF-8 (raw bytes, as Swift reads them).
    pub(crate) fn header_utf8(&self, name: &str) -> Res<Option<String>> {
        self.headers
            .get(name)
            .map(|v| {
                String::from_utf8(v.as_bytes().to_vec())
                    .map_err(|_| err_msg(400, format!("{name} must be valid UTF-8")))
            })
            .transpose()
    }

    pub(crate) fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub(crate) fn has_param(&self, name: &str) -> bool {
        self.query.iter().any(|(k, _)| k == name)
    }

    pub(crate) fn bool_header(&self, name: &str) -> bool {
        self.header(name).is_some_and(|v| {
            matches!(
                v.trim().to_ascii_lowercase().as_str(),
                "true" | "1" | "yes" | "on" | "t" | "y"
            )
        })
    }
}

/// A response under construction.
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
    pub(crate) body: SwiftBody,
    pub(crate) len: Option<u64>,
}

impl Answer {
    pub(crate) fn new(status: u16) -> Self {
        Self {
            status: StatusCode::from_u16(status).expect("valid status"),
            headers: Vec::new(),
            body: full(Bytes::new()),
            len: Some(0),
        }
    }

    pub(crate) fn header(mut self, name: &str, value: impl AsRef<[u8]>) -> Self {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_bytes(value.as_ref()),
        ) {
            self.headers.push((n, v));
        }
        self
    }

    pub(crate) fn text(mut self, content_type: &str, body: impl Into<Bytes>) -> Self {
        let b: Bytes = body.into();
        self.len = Some(b.len() as u64);
        self.body = full(b);
        self.header("content-type", content_type)
    }

    pub(crate) fn stream(mut self, s: ByteStream, len: u64) -> Self {
        self.len = Some(len);
        self.body = stream_body(s);
        self
    }
}

impl Answer {
    /// A HEAD answer: no body, the length of the body a GET would have.
    pub(crate) fn with_len(mut self, len: u64) -> Self {
        self.len = Some(len);
        self.body = full(Bytes::new());
        self
    }
}

pub(crate) fn check_container_name(name: &str) -> Res<()> {
    if name.len() > MAX_CONTAINER_NAME_LENGTH {
        return Err(err_msg(
            400,
            format!(
                "Container name length of {} longer than {MAX_CONTAINER_NAME_LENGTH}",
                name.len()
            ),
        ));
    }
    Ok(())
}

pub(crate) fn check_object_name(name: &str) -> Res<()> {
    if name.len() > MAX_OBJECT_NAME_LENGTH {
        return Err(err_msg(
            400,
            format!(
                "Object name length of {} longer than {MAX_OBJECT_NAME_LENGTH}",
                name.len()
            ),
        ));
    }
    Ok(())
}

/// Adds the common headers and builds the response.
pub(crate) fn finish(method: &Method, a: Answer) -> Response<SwiftBody> {
    let mut trans = [0u8; 10];
    rand::thread_rng().fill_bytes(&mut trans);
    let trans = format!("tx{}", hex::encode(trans));
    let mut resp = Response::new(if *method == Method::HEAD {
        full(Bytes::new())
    } else {
        a.body
    });
    *resp.status_mut() = a.status;
    let h = resp.headers_mut();
    for (n, v) in a.headers {
        h.append(n, v);
    }
    if let Some(len) = a.len {
        if a.status != StatusCode::NO_CONTENT && a.status != StatusCode::NOT_MODIFIED {
            h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
        }
    }
    if let Ok(v) = HeaderValue::from_str(&trans) {
        h.insert("x-trans-id", v.clone());
        h.insert("x-openstack-request-id", v);
    }
    if let Ok(v) = HeaderValue::from_str(&http_now()) {
        h.insert(header::DATE, v);
    }
    resp
}

/// The answer for an error.
pub(crate) fn error_answer(e: SwiftError) -> Answer {
    let mut a = Answer::new(e.status.as_u16());
    for (n, v) in e.headers {
        a = a.header(n.as_str(), v);
    }
    if e.body.is_empty() {
        a
    } else {
        a.text("text/html; charset=UTF-8", e.body)
    }
}
