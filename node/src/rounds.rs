//! The rounds loop of the long-lived programs (the device plugin, the DRA driver): discover,
//! take the ownership locks of the device kinds found ([`crate::ownership`]), serve the kinds
//! held until the round ends, then discover again, or return. A round ends on
//! - SIGTERM/SIGINT: [`serve_rounds`] returns `Ok` (also when it comes during discovery);
//! - SIGHUP: rebuild (NVIDIA's plugin restarts on SIGHUP);
//! - a takeover: a kind this program waited for is free and now held, rebuild to serve it;
//! - the program's own reason ([`Rounds::End`], the plugin's changed MIG geometry): rebuild.
//!
//! What a round discovers and how it serves it stay in the program ([`Rounds`]); every
//! rebuild is logged as `<Rounds::REBUILDING>: <why>`.

use std::convert::Infallible;
use std::fmt;
use std::future::Future;

use crate::ownership::{DeviceKind, Ownerships, Takeover};
use crate::shutdown::ShutdownSignals;

/// Why a round ended. `E` is the program's own reason ([`Rounds::End`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoundEnd<E = Infallible> {
    /// SIGTERM or SIGINT: the program exits.
    Shutdown,
    /// SIGHUP: discover and serve again.
    Hangup,
    /// A kind of device this program waited for is now its own: discover and serve again.
    Takeover(Takeover),
    /// The program's own reason to discover and serve again.
    Program(E),
}

/// The reason, as the rebuild's log line gives it (`SIGHUP`, `took over the gpu devices
/// edgegpu-device-plugin pid 42 served`, the program's own reason).
impl<E: fmt::Display> fmt::Display for RoundEnd<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RoundEnd::Shutdown => f.write_str("SIGTERM or SIGINT"),
            RoundEnd::Hangup => f.write_str("SIGHUP"),
            RoundEnd::Takeover(taken) => taken.fmt(f),
            RoundEnd::Program(why) => why.fmt(f),
        }
    }
}

/// A program served in rounds. Only [`serve_rounds`] calls these, on one thread (the
/// programs' runtime is single-threaded: [`crate::runtime`]), so no `Send` bound is asked of
/// their futures.
#[allow(async_fn_in_trait)]
pub trait Rounds {
    /// What one round's discovery found: what the round serves.
    type Found;
    /// The program's own reason to end a round ([`RoundEnd::Program`]; [`Infallible`] for
    /// none): its text is the rebuild's reason.
    type End: fmt::Display;
    /// The words the rebuild's log line starts with (`Rebuilding the resources`).
    const REBUILDING: &'static str;

    /// The round's discovery; `after` says how the previous round ended (`None` for the
    /// first). SIGTERM/SIGINT cancels it.
    async fn discover(
        &mut self,
        after: Option<&RoundEnd<Self::End>>,
    ) -> anyhow::Result<Self::Found>;

    /// The kinds of device `found` holds that this program serves when it owns them.
    fn kinds(&self, found: &Self::Found) -> Vec<DeviceKind>;

    /// Serves what `found` has of the kinds `held` (every kind when ownership is off) until
    /// `until` completes, which it must await (or hand to the server that awaits it) for the
    /// round to end; an error ends the loop.
    async fn serve(
        &mut self,
        found: Self::Found,
        held: &[DeviceKind],
        until: Until<'_, Self::End>,
    ) -> anyhow::Result<()>;
}

/// The end of one round: SIGTERM/SIGINT, SIGHUP, a takeover of a kind the program waits for,
/// or the program's own end ([`Until::end_or`]). A server stops when it completes.
pub struct Until<'a, E> {
    signals: &'a mut ShutdownSignals,
    owned: &'a mut Ownerships,
    wanted: &'a [DeviceKind],
    ended: &'a mut Option<RoundEnd<E>>,
}

impl<E> Until<'_, E> {
    /// Completes when the round ends by a signal or a takeover.
    pub async fn end(self) {
        self.end_or(std::future::pending()).await
    }

    /// Completes when the round ends by a signal, a takeover or `own` completing.
    pub async fn end_or(self, own: impl Future<Output = E>) {
        let Until {
            signals,
            owned,
            wanted,
            ended,
        } = self;
        let end = tokio::select! {
            shutdown = signals.shutdown_or_hangup() => if shutdown {
                RoundEnd::Shutdown
            } else {
                RoundEnd::Hangup
            },
            why = own => RoundEnd::Program(why),
            taken = owned.take_over(wanted) => RoundEnd::Takeover(taken),
        };
        *ended = Some(end);
    }
}

/// Round after round until SIGTERM/SIGINT (`Ok`) or an error (discovery, the ownership
/// directory, serving): discover, acquire the kinds found (`owned` keeps them for the
/// program's life: they are released when this returns), serve the ones held until the round
/// ends, log why and discover again.
pub async fn serve_rounds<P: Rounds>(
    program: &mut P,
    mut signals: ShutdownSignals,
    mut owned: Ownerships,
) -> anyhow::Result<()> {
    let mut after: Option<RoundEnd<P::End>> = None;
    loop {
        let found = tokio::select! {
            found = program.discover(after.as_ref()) => found?,
            _ = signals.recv() => return Ok(()),
        };
        // The kinds not held wait for a takeover, which ends the round.
        let wanted = program.kinds(&found);
        owned.acquire(&wanted)?;
        let held: Vec<DeviceKind> = DeviceKind::ALL
            .into_iter()
            .filter(|k| owned.holds(*k))
            .collect();
        let mut ended = None;
        let until = Until {
            signals: &mut signals,
            owned: &mut owned,
            wanted: &wanted,
            ended: &mut ended,
        };
        program.serve(found, &held, until).await?;
        // A server that stopped without the round ending has nothing left to serve.
        match ended.unwrap_or(RoundEnd::Shutdown) {
            RoundEnd::Shutdown => return Ok(()),
            end => {
                tracing::info!("{}: {end}", P::REBUILDING);
                after = Some(end);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ownership::{try_own, Owned, Ownership, TAKEOVER_POLL};

    /// Signals reach the whole test process, every installed `ShutdownSignals` of it: the
    /// tests that install them run one at a time, each on its own runtime.
    static SIGNALS: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// Runs `test` with the signal handlers installed, alone among the tests that install
    /// them; on a clock that advances by itself when idle (`paused`), for takeover polls.
    fn with_signals<T>(paused: bool, test: impl Future<Output = T>) -> T {
        let _alone = SIGNALS.lock().unwrap_or_else(|e| e.into_inner());
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(paused)
            .build()
            .unwrap()
            .block_on(test)
    }

    /// A program whose rounds follow `script`, one step per round, recording what the loop
    /// gave it.
    struct Scripted {
        script: Vec<Step>,
        kinds: Vec<DeviceKind>,
        /// How each round's previous one ended, as the rebuild's log line says it.
        afters: Vec<Option<String>>,
        helds: Vec<Vec<DeviceKind>>,
        /// Another program's lock, released when a [`Step::ReleaseAndWait`] round serves.
        other: Option<Ownership>,
    }

    enum Step {
        /// Discovery fails.
        DiscoveryFails,
        /// Discovery raises SIGTERM and never completes.
        SigtermDuringDiscovery,
        /// Serving fails before the round ends.
        ServingFails,
        /// The other program's lock goes; the round waits for its end.
        ReleaseAndWait,
        /// The round ends for the program's own reason.
        OwnEnd(&'static str),
        /// Raises the signal and waits for the round's end.
        Raise(nix::sys::signal::Signal),
    }

    impl Scripted {
        fn new(kinds: &[DeviceKind], script: Vec<Step>) -> Self {
            Scripted {
                script: script.into_iter().rev().collect(),
                kinds: kinds.to_vec(),
                afters: Vec::new(),
                helds: Vec::new(),
                other: None,
            }
        }
    }

    impl Rounds for Scripted {
        type Found = Step;
        type End = &'static str;
        const REBUILDING: &'static str = "Rebuilding";

        async fn discover(
            &mut self,
            after: Option<&RoundEnd<&'static str>>,
        ) -> anyhow::Result<Step> {
            self.afters.push(after.map(|end| end.to_string()));
            match self.script.pop().expect("a round past the script") {
                Step::DiscoveryFails => anyhow::bail!("no GPU found"),
                Step::SigtermDuringDiscovery => {
                    nix::sys::signal::raise(nix::sys::signal::Signal::SIGTERM).unwrap();
                    std::future::pending().await
                }
                step => Ok(step),
            }
        }

        fn kinds(&self, _: &Step) -> Vec<DeviceKind> {
            self.kinds.clone()
        }

        async fn serve(
            &mut self,
            step: Step,
            held: &[DeviceKind],
            until: Until<'_, &'static str>,
        ) -> anyhow::Result<()> {
            self.helds.push(held.to_vec());
            match step {
                Step::ServingFails => anyhow::bail!("cannot bind the socket"),
                Step::ReleaseAndWait => {
                    self.other = None;
                    until.end().await;
                }
                Step::OwnEnd(why) => until.end_or(async move { why }).await,
                Step::Raise(signal) => {
                    nix::sys::signal::raise(signal).unwrap();
                    until.end().await;
                }
                Step::DiscoveryFails | Step::SigtermDuringDiscovery => unreachable!(),
            }
            Ok(())
        }
    }

    /// A kind another program holds is not served; once it is released the round ends with
    /// a takeover naming that program, the next round serves it; the program's own end
    /// rebuilds too, and a discovery error ends the loop with that error.
    #[test]
    fn a_takeover_rebuilds_and_names_the_previous_holder() {
        let locks = tempfile::tempdir().unwrap();
        let other = match try_own(locks.path(), DeviceKind::Gpu, "edgegpu-dra-driver").unwrap() {
            Owned::Yes(o) => o,
            other => panic!("{other:?}"),
        };
        let mut program = Scripted::new(
            &[DeviceKind::Gpu, DeviceKind::Dla],
            vec![
                Step::ReleaseAndWait,
                Step::OwnEnd("the MIG geometry changed"),
                Step::DiscoveryFails,
            ],
        );
        program.other = Some(other);
        let owned = Ownerships::new(Some(locks.path().into()), "edgegpu-device-plugin");
        let (error, took) = with_signals(true, async {
            let started = tokio::time::Instant::now();
            let signals = ShutdownSignals::install().unwrap();
            let error = serve_rounds(&mut program, signals, owned)
                .await
                .unwrap_err();
            (error, started.elapsed())
        });
        assert_eq!(error.to_string(), "no GPU found");
        assert!(took >= TAKEOVER_POLL, "taken over at a poll");
        assert_eq!(
            program.helds,
            [
                vec![DeviceKind::Dla],
                vec![DeviceKind::Gpu, DeviceKind::Dla]
            ]
        );
        let holder = format!("edgegpu-dra-driver pid {}", std::process::id());
        assert_eq!(
            program.afters,
            [
                None,
                Some(format!("took over the gpu devices {holder} served")),
                Some("the MIG geometry changed".to_string()),
            ]
        );
        // The loop's locks went with it.
        assert!(matches!(
            try_own(locks.path(), DeviceKind::Gpu, "next").unwrap(),
            Owned::Yes(_)
        ));
    }

    /// An error while serving ends the loop with it, the kinds still held until then.
    #[test]
    fn a_serving_error_ends_the_loop() {
        let mut program = Scripted::new(&[DeviceKind::Gpu], vec![Step::ServingFails]);
        // Ownership off: every kind counts as held.
        let owned = Ownerships::new(None, "edgegpu-device-plugin");
        let error = with_signals(false, async {
            let signals = ShutdownSignals::install().unwrap();
            serve_rounds(&mut program, signals, owned)
                .await
                .unwrap_err()
        });
        assert_eq!(error.to_string(), "cannot bind the socket");
        assert_eq!(program.helds, [DeviceKind::ALL.to_vec()]);
    }

    /// SIGHUP rebuilds, SIGTERM returns `Ok`, during a round or during discovery (the
    /// handlers are installed before a signal is raised: it never kills the test process).
    #[test]
    fn sighup_rebuilds_and_sigterm_returns() {
        use nix::sys::signal::Signal;
        let mut program = Scripted::new(
            &[DeviceKind::Gpu],
            vec![Step::Raise(Signal::SIGHUP), Step::Raise(Signal::SIGTERM)],
        );
        let owned = Ownerships::new(None, "edgegpu-dra-driver");
        with_signals(false, async {
            let signals = ShutdownSignals::install().unwrap();
            serve_rounds(&mut program, signals, owned).await.unwrap()
        });
        assert_eq!(program.afters, [None, Some("SIGHUP".to_string())]);
        assert_eq!(program.helds.len(), 2);

        let mut program = Scripted::new(&[DeviceKind::Gpu], vec![Step::SigtermDuringDiscovery]);
        let owned = Ownerships::new(None, "edgegpu-dra-driver");
        with_signals(false, async {
            let signals = ShutdownSignals::install().unwrap();
            serve_rounds(&mut program, signals, owned).await.unwrap()
        });
        assert!(program.helds.is_empty(), "nothing served");
    }

    #[test]
    fn the_reasons_read_as_the_log_lines_say_them() {
        let taken = Takeover {
            kind: DeviceKind::Dla,
            previous_holder: Some("edgegpu-device-plugin pid 7".into()),
        };
        assert_eq!(
            RoundEnd::<Infallible>::Takeover(taken).to_string(),
            "took over the dla devices edgegpu-device-plugin pid 7 served"
        );
        assert_eq!(RoundEnd::<Infallible>::Hangup.to_string(), "SIGHUP");
        assert_eq!(
            RoundEnd::Program("the MIG geometry changed").to_string(),
            "the MIG geometry changed"
        );
    }
}
