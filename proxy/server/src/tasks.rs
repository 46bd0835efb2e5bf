//! The server's background tasks and the one signal that stops them all.
//!
//! Every task (the S3, Swift and operator listeners, the checkpointer, the
//! expiry purger) watches the same [`Shutdown`]; [`Tasks::stop`] raises it once
//! and then waits for each task in the order they were started, a listener for
//! at most the grace period its in-flight requests get.

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A task's side of the stop signal: [`Shutdown::wait`] completes once the
/// server stops (at once if it already has).
#[derive(Clone, Debug)]
pub struct Shutdown(watch::Receiver<bool>);

impl Shutdown {
    /// The side of a signal of its own (true: stop).
    pub(crate) fn new(rx: watch::Receiver<bool>) -> Self {
        Self(rx)
    }

    /// Completes when the stop signal is raised.
    pub async fn wait(&mut self) {
        // An error means the sender is gone: the server is gone, stop too.
        let _ = self.0.wait_for(|stopped| *stopped).await;
    }
}

/// How [`Tasks::stop`] waits for a task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Until it ends (it ends at the signal, after the work under way).
    Finish,
    /// At most the grace period plus a second (a listener letting its in-flight
    /// requests finish); then a warning, and the task is aborted.
    Grace,
}

/// A task the server started, with what [`Tasks::stop`] says if it outlives its
/// grace period.
struct Task {
    late: &'static str,
    wait: Wait,
    handle: JoinHandle<()>,
}

/// The server's tasks (see the module documentation).
pub struct Tasks {
    signal: watch::Sender<bool>,
    /// In start order, which is the order [`Tasks::stop`] waits in.
    tasks: Vec<Task>,
}

impl Default for Tasks {
    fn default() -> Self {
        Self {
            signal: watch::channel(false).0,
            tasks: Vec::new(),
        }
    }
}

impl Tasks {
    /// The signal a task started here watches.
    pub fn shutdown(&self) -> Shutdown {
        Shutdown(self.signal.subscribe())
    }

    /// Spawns `task`; `late` is the warning logged when a [`Wait::Grace`] task
    /// outlives its grace period.
    pub fn spawn(
        &mut self,
        late: &'static str,
        wait: Wait,
        task: impl Future<Output = ()> + Send + 'static,
    ) {
        self.tasks.push(Task {
            late,
            wait,
            handle: tokio::spawn(task),
        });
    }

    /// Raises the stop signal and waits for every task (see [`Wait`]).
    pub async fn stop(self, grace: Duration) {
        self.signal.send_replace(true);
        for t in self.tasks {
            match t.wait {
                Wait::Finish => {
                    let _ = t.handle.await;
                }
                Wait::Grace => {
                    let abort = t.handle.abort_handle();
                    if tokio::time::timeout(grace + Duration::from_secs(1), t.handle)
                        .await
                        .is_err()
                    {
                        tracing::warn!("{} within {grace:?}", t.late);
                        abort.abort();
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    use super::*;

    #[tokio::test]
    async fn one_signal_stops_every_task_and_a_late_one_is_aborted() {
        let mut tasks = Tasks::default();
        let done = Arc::new(AtomicU32::new(0));
        for _ in 0..3 {
            let (mut stop, done) = (tasks.shutdown(), done.clone());
            tasks.spawn("late", Wait::Finish, async move {
                stop.wait().await;
                done.fetch_add(1, Ordering::SeqCst);
            });
        }
        // A listener whose requests never finish: aborted after the grace.
        let stuck = Arc::new(AtomicU32::new(0));
        let s = stuck.clone();
        tasks.spawn("stuck requests did not finish", Wait::Grace, async move {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            s.fetch_add(1, Ordering::SeqCst);
        });
        // A task started after the signal would stop at once too.
        let mut late = tasks.shutdown();
        tasks.stop(Duration::from_millis(10)).await;
        assert_eq!(done.load(Ordering::SeqCst), 3);
        assert_eq!(stuck.load(Ordering::SeqCst), 0);
        late.wait().await;
    }
}
