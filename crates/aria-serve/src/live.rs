//! Jobs running in this process: their cancel flags and the WAV bytes decoded so far, which
//! `GET /v1/jobs/{id}/audio` streams while the decoder still runs.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

/// Bytes per sample of the WAV files (16-bit PCM).
pub const BYTES_PER_SAMPLE: usize = 2;

/// The 44-byte header of a 16-bit PCM WAV file of `frames` frames.
pub fn wav_header(channels: u16, sample_rate: u32, frames: u64) -> [u8; 44] {
    let block = u32::from(channels) * BYTES_PER_SAMPLE as u32;
    let data = u32::try_from(frames * u64::from(block)).unwrap_or(u32::MAX - 36);
    let mut h = [0u8; 44];
    h[0..4].copy_from_slice(b"RIFF");
    h[4..8].copy_from_slice(&(36 + data).to_le_bytes());
    h[8..12].copy_from_slice(b"WAVE");
    h[12..16].copy_from_slice(b"fmt ");
    h[16..20].copy_from_slice(&16u32.to_le_bytes());
    h[20..22].copy_from_slice(&1u16.to_le_bytes());
    h[22..24].copy_from_slice(&channels.to_le_bytes());
    h[24..28].copy_from_slice(&sample_rate.to_le_bytes());
    h[28..32].copy_from_slice(&(sample_rate * block).to_le_bytes());
    h[32..34].copy_from_slice(&(block as u16).to_le_bytes());
    h[34..36].copy_from_slice(&16u16.to_le_bytes());
    h[36..40].copy_from_slice(b"data");
    h[40..44].copy_from_slice(&data.to_le_bytes());
    h
}

/// A sample in [−1, 1] as 16-bit PCM (the `aria` CLI's `--pcm16` rounding).
pub fn pcm16(v: f32) -> i16 {
    (v.clamp(-1.0, 1.0) * 32767.0).round() as i16
}

/// How the bytes of a live job end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LiveEnd {
    /// Still decoding.
    Open,
    /// Every byte is in.
    Complete,
    /// The job stopped (failed, cancelled or handed back): the bytes will not complete.
    Aborted,
}

/// One job running here.
#[derive(Debug)]
pub struct LiveJob {
    /// Cancel asked for (locally or seen in the store).
    pub cancel: AtomicBool,
    bytes: Mutex<(Vec<u8>, LiveEnd)>,
    version: watch::Sender<u64>,
}

impl LiveJob {
    /// A live job whose WAV starts with `header`.
    pub fn new(header: &[u8]) -> LiveJob {
        LiveJob {
            cancel: AtomicBool::new(false),
            bytes: Mutex::new((header.to_vec(), LiveEnd::Open)),
            version: watch::channel(0).0,
        }
    }

    /// Append decoded bytes.
    pub fn push(&self, b: &[u8]) {
        if let Ok(mut g) = self.bytes.lock() {
            g.0.extend_from_slice(b);
        }
        self.version.send_modify(|v| *v += 1);
    }

    /// Mark the end.
    pub fn end(&self, how: LiveEnd) {
        if let Ok(mut g) = self.bytes.lock() {
            g.1 = how;
        }
        self.version.send_modify(|v| *v += 1);
    }

    /// The bytes from `offset` on, and how the stream stands.
    pub fn read_from(&self, offset: usize) -> (Vec<u8>, LiveEnd) {
        match self.bytes.lock() {
            Ok(g) => (g.0.get(offset..).unwrap_or_default().to_vec(), g.1),
            Err(_) => (Vec::new(), LiveEnd::Aborted),
        }
    }

    /// A receiver told of every change.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.version.subscribe()
    }

    /// Whether cancel was asked for.
    pub fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }
}

/// The live jobs of this process, by id.
#[derive(Debug, Default)]
pub struct LiveJobs(Mutex<HashMap<String, Arc<LiveJob>>>);

impl LiveJobs {
    /// Register `job` as `id`.
    pub fn insert(&self, id: &str, job: Arc<LiveJob>) {
        if let Ok(mut m) = self.0.lock() {
            m.insert(id.to_string(), job);
        }
    }

    /// The live job `id`.
    pub fn get(&self, id: &str) -> Option<Arc<LiveJob>> {
        self.0.lock().ok()?.get(id).cloned()
    }

    /// Forget `id` (readers keep their `Arc`).
    pub fn remove(&self, id: &str) {
        if let Ok(mut m) = self.0.lock() {
            m.remove(id);
        }
    }

    /// The ids of the live jobs.
    pub fn ids(&self) -> Vec<String> {
        self.0
            .lock()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    }
}
