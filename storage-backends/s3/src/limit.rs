//! An SDK interceptor that caps every response body: the SDK buffers listings
//! and error documents whole before parsing them, and the provider is untrusted.

use std::pin::Pin;
use std::task::{Context, Poll};

use aws_sdk_s3::config::interceptors::BeforeDeserializationInterceptorContextMut;
use aws_sdk_s3::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_s3::primitives::SdkBody;
use bytes::Bytes;

/// Fails a response body once it exceeds the cap (bytes).
#[derive(Debug)]
pub(crate) struct BodyCap(pub(crate) u64);

impl Intercept for BodyCap {
    fn name(&self) -> &'static str {
        "oram-body-cap"
    }

    fn modify_before_deserialization(
        &self,
        context: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), aws_sdk_s3::error::BoxError> {
        let cap = self.0;
        if let Some(n) = context.response().body().content_length() {
            if n > cap {
                return Err(format!("response body of {n} bytes exceeds the cap of {cap}").into());
            }
        }
        let body = context.response_mut().take_body();
        *context.response_mut().body_mut() = SdkBody::from_body_1_x(Capped {
            inner: body,
            seen: 0,
            cap,
        });
        Ok(())
    }
}

struct Capped {
    inner: SdkBody,
    seen: u64,
    cap: u64,
}

impl http_body::Body for Capped {
    type Data = Bytes;
    type Error = aws_sdk_s3::error::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(d) = frame.data_ref() {
                    this.seen += d.len() as u64;
                    if this.seen > this.cap {
                        return Poll::Ready(Some(Err(format!(
                            "response body exceeds the cap of {} bytes",
                            this.cap
                        )
                        .into())));
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
