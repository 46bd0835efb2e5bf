//! The listener side of a node: accepts fronts over mutual TLS and answers
//! their requests in order, for one slot's partitions ([`crate::NodeHost`]) or
//! for every slot a node process serves ([`crate::HostSet`]).

use std::future::Future;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::tls::ClusterTls;
use crate::wire::{read_frame, write_frame, Envelope, Reply, Response};

/// How long a front has to complete its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// What answers a front's requests.
pub(crate) trait Answers: Clone + Send + Sync + 'static {
    /// The block size of every partition served.
    fn block_size(&self) -> usize;
    /// Answers one request.
    fn answer(&self, env: Envelope) -> impl Future<Output = Reply> + Send;
}

/// Serves fronts on `listener` with `answers` until `shutdown` resolves. Each
/// connection is served on its own task; a peer without a certificate of the
/// cluster's CA is refused at the handshake.
pub(crate) async fn serve<A: Answers>(
    answers: &A,
    listener: TcpListener,
    tls: ClusterTls,
    shutdown: impl Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let mut conns = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => {
                let Ok((tcp, peer)) = accepted else { continue };
                let _ = tcp.set_nodelay(true);
                let answers = answers.clone();
                let acceptor = tls.acceptor.clone();
                conns.spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(stream)) => connection(&answers, stream).await,
                        Ok(Err(e)) => tracing::warn!(%peer, "cluster handshake refused: {e}"),
                        Err(_) => tracing::warn!(%peer, "cluster handshake timed out"),
                    }
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    conns.shutdown().await;
}

/// One front's connection: requests answered in order.
async fn connection<A: Answers, S>(answers: &A, mut stream: S)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let bs = answers.block_size();
    loop {
        let frame = match read_frame(&mut stream).await {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(e) => {
                tracing::debug!("cluster connection: {e}");
                break;
            }
        };
        let reply = match Envelope::decode(frame, bs) {
            Ok(env) => answers.answer(env).await,
            Err(e) => Reply {
                token: 0,
                response: Response::Failed(oram_engine::OramError::Config(e.to_string())),
            },
        };
        if write_frame(&mut stream, &reply.encode(bs)).await.is_err() {
            break;
        }
    }
}
