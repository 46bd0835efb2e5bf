//! The two storage APIs a workload can drive: S3 (aws-sdk-s3) and OpenStack Swift
//! (auth v1, plain HTTP/1.1 with hyper). A container is a bucket.

use std::future::Future;
use std::pin::Pin;

use aws_sdk_s3::config::{Credentials, Region};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::Client;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::rt::TokioExecutor;

/// Where and as whom to send requests.
#[derive(Clone, Debug)]
pub struct Endpoint {
    /// S3: `http://host:port`; Swift: the auth URL, `http://host:port/auth/v1.0`.
    pub url: String,
    /// S3 access key; Swift `X-Auth-User` (`account:user`).
    pub access_key: String,
    /// S3 secret key; Swift `X-Auth-Key`.
    pub secret_key: String,
}

/// A boxed future of an API call.
pub type Call<'a, T> = Pin<Box<dyn Future<Output = Result<T, String>> + Send + 'a>>;

/// The operations a workload uses. Errors are one line of text.
pub trait Api: Send + Sync {
    /// Creates a container (one that exists and is ours is fine).
    fn create_container<'a>(&'a self, c: &'a str) -> Call<'a, ()>;
    /// Writes an object.
    fn put<'a>(&'a self, c: &'a str, key: &'a str, body: Bytes) -> Call<'a, ()>;
    /// Reads a whole object.
    fn get<'a>(&'a self, c: &'a str, key: &'a str) -> Call<'a, Bytes>;
    /// Deletes an object (a missing one is fine).
    fn delete<'a>(&'a self, c: &'a str, key: &'a str) -> Call<'a, ()>;
    /// One page of names after `marker`, and the marker of the next page.
    fn list<'a>(
        &'a self,
        c: &'a str,
        marker: Option<String>,
    ) -> Call<'a, (Vec<String>, Option<String>)>;
    /// Deletes an empty container.
    fn delete_container<'a>(&'a self, c: &'a str) -> Call<'a, ()>;
}

/// An S3 client for `ep` (path-style, SigV4). The SDK's stalled-stream protection
/// (abort a download that sends nothing for 5 s) is off: with large blocks one
/// ORAM access of a download can take longer than that over the shaped link.
pub fn s3_client(ep: &Endpoint) -> Client {
    let http = aws_smithy_http_client::Builder::new().build_http();
    let conf = aws_sdk_s3::Config::builder()
        .behavior_version_latest()
        .region(Region::new("us-east-1"))
        .endpoint_url(&ep.url)
        .force_path_style(true)
        .credentials_provider(Credentials::new(
            &ep.access_key,
            &ep.secret_key,
            None,
            None,
            "oram-workload",
        ))
        .http_client(http)
        .stalled_stream_protection(aws_sdk_s3::config::StalledStreamProtectionConfig::disabled())
        .build();
    Client::from_conf(conf)
}

fn err_text<E: std::error::Error + 'static>(e: &aws_sdk_s3::error::SdkError<E>) -> String {
    use std::error::Error;
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(x) = src {
        s.push_str(": ");
        s.push_str(&x.to_string());
        src = x.source();
    }
    s
}

/// The S3 API.
pub struct S3(pub Client);

impl Api for S3 {
    fn create_container<'a>(&'a self, c: &'a str) -> Call<'a, ()> {
        Box::pin(async move {
            match self.0.create_bucket().bucket(c).send().await {
                Ok(_) => Ok(()),
                Err(e) => {
                    let code = e.as_service_error().and_then(|s| {
                        aws_sdk_s3::error::ProvideErrorMetadata::code(s).map(str::to_string)
                    });
                    if code.as_deref() == Some("BucketAlreadyOwnedByYou") {
                        Ok(())
                    } else {
                        Err(format!("create bucket {c}: {}", err_text(&e)))
                    }
                }
            }
        })
    }

    fn put<'a>(&'a self, c: &'a str, key: &'a str, body: Bytes) -> Call<'a, ()> {
        Box::pin(async move {
            self.0
                .put_object()
                .bucket(c)
                .key(key)
                .body(ByteStream::from(body))
                .send()
                .await
                .map(|_| ())
                .map_err(|e| format!("PUT {c}/{key}: {}", err_text(&e)))
        })
    }

    fn get<'a>(&'a self, c: &'a str, key: &'a str) -> Call<'a, Bytes> {
        Box::pin(async move {
            let out = self
                .0
                .get_object()
                .bucket(c)
                .key(key)
                .send()
                .await
                .map_err(|e| format!("GET {c}/{key}: {}", err_text(&e)))?;
            Ok(out
                .body
                .collect()
                .await
                .map_err(|e| format!("GET {c}/{key} body: {e}"))?
                .into_bytes())
        })
    }

    fn delete<'a>(&'a self, c: &'a str, key: &'a str) -> Call<'a, ()> {
        Box::pin(async move {
            self.0
                .delete_object()
                .bucket(c)
                .key(key)
                .send()
                .await
                .map(|_| ())
                .map_err(|e| format!("DELETE {c}/{key}: {}", err_text(&e)))
        })
    }

    fn list<'a>(
        &'a self,
        c: &'a str,
        marker: Option<String>,
    ) -> Call<'a, (Vec<String>, Option<String>)> {
        Box::pin(async move {
            let out = self
                .0
                .list_objects_v2()
                .bucket(c)
                .set_continuation_token(marker)
                .send()
                .await
                .map_err(|e| format!("LIST {c}: {}", err_text(&e)))?;
            let names = out
                .contents()
                .iter()
                .filter_map(|o| o.key().map(str::to_string))
                .collect();
            Ok((names, out.next_continuation_token().map(str::to_string)))
        })
    }

    fn delete_container<'a>(&'a self, c: &'a str) -> Call<'a, ()> {
        Box::pin(async move {
            self.0
                .delete_bucket()
                .bucket(c)
                .send()
                .await
                .map(|_| ())
                .map_err(|e| format!("DELETE BUCKET {c}: {}", err_text(&e)))
        })
    }
}

/// The Swift API: authenticates once (auth v1) and keeps the token.
pub struct Swift {
    http: HttpClient<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
    storage_url: String,
    token: String,
}

/// Percent-encodes a path segment (object names may hold any character).
fn enc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl Swift {
    /// Authenticates at `ep.url` (e.g. `http://127.0.0.1:8080/auth/v1.0`).
    pub async fn connect(ep: &Endpoint) -> Result<Self, String> {
        let http = HttpClient::builder(TokioExecutor::new()).build_http();
        let req = http::Request::get(&ep.url)
            .header("X-Auth-User", &ep.access_key)
            .header("X-Auth-Key", &ep.secret_key)
            .body(Full::new(Bytes::new()))
            .map_err(|e| e.to_string())?;
        let resp = http
            .request(req)
            .await
            .map_err(|e| format!("auth at {}: {e}", ep.url))?;
        if !resp.status().is_success() {
            return Err(format!("auth at {}: {}", ep.url, resp.status()));
        }
        let h = |n: &str| {
            resp.headers()
                .get(n)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
                .ok_or_else(|| format!("auth at {}: no {n}", ep.url))
        };
        Ok(Self {
            storage_url: h("X-Storage-Url")?,
            token: h("X-Auth-Token")?,
            http,
        })
    }

    async fn call(
        &self,
        method: http::Method,
        path: &str,
        body: Bytes,
        ok: &[u16],
    ) -> Result<Bytes, String> {
        let url = format!("{}/{path}", self.storage_url.trim_end_matches('/'));
        let req = http::Request::builder()
            .method(method.clone())
            .uri(&url)
            .header("X-Auth-Token", &self.token)
            .body(Full::new(body))
            .map_err(|e| e.to_string())?;
        let resp = self
            .http
            .request(req)
            .await
            .map_err(|e| format!("{method} {path}: {e}"))?;
        let status = resp.status().as_u16();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("{method} {path} body: {e}"))?
            .to_bytes();
        if ok.contains(&status) || (200..300).contains(&status) {
            Ok(body)
        } else {
            Err(format!(
                "{method} {path}: {status} {}",
                String::from_utf8_lossy(&body[..body.len().min(200)])
            ))
        }
    }
}

impl Api for Swift {
    fn create_container<'a>(&'a self, c: &'a str) -> Call<'a, ()> {
        Box::pin(async move {
            self.call(http::Method::PUT, &enc(c), Bytes::new(), &[])
                .await
                .map(|_| ())
        })
    }

    fn put<'a>(&'a self, c: &'a str, key: &'a str, body: Bytes) -> Call<'a, ()> {
        Box::pin(async move {
            self.call(
                http::Method::PUT,
                &format!("{}/{}", enc(c), enc(key)),
                body,
                &[],
            )
            .await
            .map(|_| ())
        })
    }

    fn get<'a>(&'a self, c: &'a str, key: &'a str) -> Call<'a, Bytes> {
        Box::pin(async move {
            self.call(
                http::Method::GET,
                &format!("{}/{}", enc(c), enc(key)),
                Bytes::new(),
                &[],
            )
            .await
        })
    }

    fn delete<'a>(&'a self, c: &'a str, key: &'a str) -> Call<'a, ()> {
        Box::pin(async move {
            self.call(
                http::Method::DELETE,
                &format!("{}/{}", enc(c), enc(key)),
                Bytes::new(),
                &[404],
            )
            .await
            .map(|_| ())
        })
    }

    fn list<'a>(
        &'a self,
        c: &'a str,
        marker: Option<String>,
    ) -> Call<'a, (Vec<String>, Option<String>)> {
        Box::pin(async move {
            let q = match &marker {
                Some(m) => format!("{}?limit=1000&marker={}", enc(c), enc(m)),
                None => format!("{}?limit=1000", enc(c)),
            };
            let body = self.call(http::Method::GET, &q, Bytes::new(), &[]).await?;
            let names: Vec<String> = String::from_utf8_lossy(&body)
                .lines()
                .filter(|l| !l.is_empty())
                .map(str::to_string)
                .collect();
            let next = if names.len() == 1000 {
                names.last().cloned()
            } else {
                None
            };
            Ok((names, next))
        })
    }

    fn delete_container<'a>(&'a self, c: &'a str) -> Call<'a, ()> {
        Box::pin(async move {
            self.call(http::Method::DELETE, &enc(c), Bytes::new(), &[])
                .await
                .map(|_| ())
        })
    }
}
