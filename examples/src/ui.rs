//! What the program tells the user on stderr: spinners and the step bar (unless quiet), notes,
//! warnings (always).

use std::time::{Duration, Instant};

use aria::Event;
use indicatif::{ProgressBar, ProgressStyle};

/// Progress display (bars on stderr unless quiet).
pub struct Ui {
    pub quiet: bool,
    pub verbose: bool,
    pub start: Instant,
}

impl Ui {
    /// A line on stderr with `--verbose` only.
    pub fn detail(&self, msg: &str) {
        if self.verbose && !self.quiet {
            eprintln!("{msg}");
        }
    }

    pub fn spinner(&self, msg: &str) -> ProgressBar {
        if self.quiet {
            return ProgressBar::hidden();
        }
        let pb = ProgressBar::new_spinner().with_message(msg.to_string());
        pb.enable_steady_tick(Duration::from_millis(100));
        pb
    }

    /// A line on stderr unless quiet.
    pub fn note(&self, msg: &str) {
        if !self.quiet {
            eprintln!("{msg}");
        }
    }

    /// A line on stderr, quiet or not.
    pub fn warn(&self, msg: &str) {
        eprintln!("warning: {msg}");
    }

    /// The progress callback of a generation: a spinner for the prompt, a bar for the steps, a
    /// bar over the latents for the decode.
    pub fn generation_progress(&self) -> impl FnMut(&Event) + '_ {
        let text_pb = self.spinner("encoding the prompt");
        let mut steps_pb: Option<ProgressBar> = None;
        let mut dec_pb: Option<ProgressBar> = None;
        let bar = |len: usize, template: &str| {
            if self.quiet {
                return ProgressBar::hidden();
            }
            let pb = ProgressBar::new(len as u64);
            if let Ok(st) = ProgressStyle::with_template(template) {
                pb.set_style(st);
            }
            pb
        };
        move |e: &Event| match e {
            Event::TextDone => text_pb.finish_and_clear(),
            Event::Step { index, total, .. } => {
                let pb = steps_pb.get_or_insert_with(|| {
                    bar(
                        *total,
                        "sampling {bar:30} {pos}/{len} steps {elapsed_precise}",
                    )
                });
                pb.set_position(*index as u64 + 1);
            }
            Event::Decoding => {
                text_pb.finish_and_clear();
                if let Some(pb) = &steps_pb {
                    pb.finish_and_clear();
                }
            }
            Event::DecodeProgress { done, total } => {
                let pb = dec_pb.get_or_insert_with(|| {
                    bar(
                        *total,
                        "decoding {bar:30} {pos}/{len} latents {elapsed_precise}",
                    )
                });
                pb.set_position(*done as u64);
            }
            Event::Decoded => {
                if let Some(pb) = &dec_pb {
                    pb.finish_and_clear();
                }
            }
            Event::AudioEncoded => {}
        }
    }
}

pub fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}
