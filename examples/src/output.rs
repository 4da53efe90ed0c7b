//! Audio files written as the audio arrives: WAV (hound; the bytes of
//! `aria_codec::audio::write_wav`) or FLAC (flacenc; frames written as they fill, the stream
//! header rewritten at the end), picked by the file extension.

use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use aria::{Error, Result};
use aria_core::Tensor;
use flacenc::bitsink::ByteSink;
use flacenc::component::{BitRepr, Stream, StreamInfo};
use flacenc::error::Verify;
use flacenc::source::{Context, Fill, FrameBuf};

/// Samples per FLAC frame (the reference encoder's default).
const FLAC_BLOCK: usize = 4096;

/// Output container, from the file extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Container {
    /// RIFF WAVE.
    Wav,
    /// FLAC.
    Flac,
}

impl Container {
    /// `.flac` (any case) is FLAC; `.wav`, `.wave` or no extension is WAV; anything else is an
    /// error naming the file.
    pub fn of(path: &Path) -> Result<Container> {
        match path
            .extension()
            .map(|e| e.to_string_lossy().to_ascii_lowercase())
            .as_deref()
        {
            Some("flac") => Ok(Container::Flac),
            None | Some("wav") | Some("wave") => Ok(Container::Wav),
            Some(e) => Err(Error::Input(format!(
                "{}: unknown output format `.{e}` (use .wav or .flac)",
                path.display()
            ))),
        }
    }
}

/// The output files of a batch. One item is written to `output` exactly as given (no extension
/// added or replaced: `-o my.song.v2.wav` writes `my.song.v2.wav`, `-o take` writes WAV to
/// `take`). Several are named as the official CLI names them: the last extension of the file
/// name is taken off and `_0`, `_1`, … put before it (`NAME_0.EXT`, …; `.wav` when the file name
/// has no extension). Dots in directory names are left alone.
pub fn batch_paths(output: &Path, n: usize) -> Vec<PathBuf> {
    if n <= 1 {
        return vec![output.to_path_buf()];
    }
    let ext = output
        .extension()
        .map(|e| e.to_string_lossy().into_owned())
        .unwrap_or_else(|| "wav".into());
    let stem = output.with_extension("");
    (0..n)
        .map(|i| {
            let mut name = stem.as_os_str().to_os_string();
            name.push(format!("_{i}.{ext}"));
            PathBuf::from(name)
        })
        .collect()
}

/// The samples of a written file: 32-bit float (WAV; 24-bit for FLAC), 16-bit or 24-bit PCM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Depth {
    /// WAV: IEEE 32-bit float (`WAVE_FORMAT_EXTENSIBLE`, which Python's `wave` cannot read);
    /// FLAC: 24-bit.
    Float,
    /// 16-bit PCM (read by every WAV reader).
    Pcm16,
    /// 24-bit PCM.
    Pcm24,
}

impl Depth {
    /// The depth of the `--pcm16` / `--pcm24` flags.
    pub fn of(pcm16: bool, pcm24: bool) -> Depth {
        match (pcm16, pcm24) {
            (true, _) => Depth::Pcm16,
            (false, true) => Depth::Pcm24,
            _ => Depth::Float,
        }
    }

    /// What a file of `path` holds at this depth, for messages.
    pub fn describe(self, path: &Path) -> &'static str {
        let flac = matches!(Container::of(path), Ok(Container::Flac));
        match (self, flac) {
            (Depth::Float, false) => "32-bit float WAV",
            (Depth::Pcm16, false) => "16-bit PCM WAV",
            (Depth::Pcm24, false) => "24-bit PCM WAV",
            (Depth::Pcm16, true) => "16-bit FLAC",
            (_, true) => "24-bit FLAC",
        }
    }
}

/// An audio file being written.
pub enum AudioWriter {
    /// WAV through hound.
    Wav {
        w: Box<hound::WavWriter<BufWriter<File>>>,
        depth: Depth,
        path: PathBuf,
    },
    /// FLAC through flacenc.
    Flac(Box<FlacWriter>),
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |e| Error::io(path, e)
}

impl AudioWriter {
    /// Create `path` for `channels` channels at `sample_rate`, WAV or FLAC by its extension, at
    /// `depth`.
    pub fn create(path: &Path, channels: usize, sample_rate: u32, depth: Depth) -> Result<Self> {
        if channels == 0 || channels > 8 {
            return Err(Error::Input(format!(
                "{}: cannot write {channels} channels",
                path.display()
            )));
        }
        match Container::of(path)? {
            Container::Wav => {
                let spec = hound::WavSpec {
                    channels: channels as u16,
                    sample_rate,
                    bits_per_sample: match depth {
                        Depth::Float => 32,
                        Depth::Pcm16 => 16,
                        Depth::Pcm24 => 24,
                    },
                    sample_format: if depth == Depth::Float {
                        hound::SampleFormat::Float
                    } else {
                        hound::SampleFormat::Int
                    },
                };
                let w = hound::WavWriter::create(path, spec).map_err(|e| wav_err(path, e))?;
                Ok(AudioWriter::Wav {
                    w: Box::new(w),
                    depth,
                    path: path.to_path_buf(),
                })
            }
            Container::Flac => Ok(AudioWriter::Flac(Box::new(FlacWriter::create(
                path,
                channels,
                sample_rate,
                if depth == Depth::Pcm16 { 16 } else { 24 },
            )?))),
        }
    }

    /// Append audio `[channels, n]` (or `[1, channels, n]`).
    pub fn write(&mut self, audio: &Tensor) -> Result<()> {
        let s = audio.shape();
        let (ch, n) = match s {
            [c, n] | [1, c, n] => (*c, *n),
            _ => {
                return Err(Error::Input(format!(
                    "audio must be [channels, samples], got {s:?}"
                )))
            }
        };
        let a = audio.contiguous()?;
        let v = a.as_slice::<f32>()?;
        match self {
            AudioWriter::Wav { w, depth, path } => {
                for i in 0..n {
                    for c in 0..ch {
                        let x = v[c * n + i];
                        let r = match depth {
                            Depth::Pcm16 => {
                                w.write_sample((x.clamp(-1.0, 1.0) * 32767.0).round() as i16)
                            }
                            Depth::Pcm24 => {
                                w.write_sample((x.clamp(-1.0, 1.0) * 8_388_607.0).round() as i32)
                            }
                            Depth::Float => w.write_sample(x),
                        };
                        r.map_err(|e| wav_err(path, e))?;
                    }
                }
                Ok(())
            }
            AudioWriter::Flac(f) => f.write(v, ch, n),
        }
    }

    /// Finish the file (sizes, FLAC stream header).
    pub fn finish(self) -> Result<()> {
        match self {
            AudioWriter::Wav { w, path, .. } => w.finalize().map_err(|e| wav_err(&path, e)),
            AudioWriter::Flac(f) => f.finish(),
        }
    }
}

fn wav_err(path: &Path, e: hound::Error) -> Error {
    Error::Audio {
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}

fn flac_err(path: &Path, what: impl std::fmt::Display) -> Error {
    Error::Audio {
        path: path.to_path_buf(),
        reason: format!("FLAC encoder: {what}"),
    }
}

/// A FLAC file written frame by frame: `fLaC` and a STREAMINFO placeholder first, each frame as
/// soon as [`FLAC_BLOCK`] samples are in, the final STREAMINFO (length, frame sizes, MD5)
/// written over the placeholder at the end.
pub struct FlacWriter {
    path: PathBuf,
    file: BufWriter<File>,
    config: flacenc::error::Verified<flacenc::config::Encoder>,
    info: StreamInfo,
    buf: (FrameBuf, Context),
    /// Interleaved samples not yet in a frame.
    pending: Vec<i32>,
    channels: usize,
    bits: usize,
    frames: usize,
}

impl FlacWriter {
    fn create(path: &Path, channels: usize, sample_rate: u32, bits: usize) -> Result<Self> {
        let config = flacenc::config::Encoder::default()
            .into_verified()
            .map_err(|(_, e)| flac_err(path, e))?;
        let mut info =
            StreamInfo::new(sample_rate as usize, channels, bits).map_err(|e| flac_err(path, e))?;
        info.set_block_sizes(FLAC_BLOCK, FLAC_BLOCK)
            .map_err(|e| flac_err(path, e))?;
        let buf = (
            FrameBuf::with_size(channels, FLAC_BLOCK).map_err(|e| flac_err(path, e))?,
            Context::new(bits, channels),
        );
        let mut file = BufWriter::new(File::create(path).map_err(io(path))?);
        file.write_all(&header(path, &info)?).map_err(io(path))?;
        Ok(FlacWriter {
            path: path.to_path_buf(),
            file,
            config,
            info,
            buf,
            pending: Vec::with_capacity(2 * FLAC_BLOCK * channels),
            channels,
            bits,
            frames: 0,
        })
    }

    fn write(&mut self, v: &[f32], ch: usize, n: usize) -> Result<()> {
        if ch != self.channels {
            return Err(flac_err(
                &self.path,
                format!("{ch} channels given to a {}-channel file", self.channels),
            ));
        }
        let scale = ((1i64 << (self.bits - 1)) - 1) as f32;
        for i in 0..n {
            for c in 0..ch {
                self.pending
                    .push((v[c * n + i].clamp(-1.0, 1.0) * scale).round() as i32);
            }
        }
        let block = FLAC_BLOCK * ch;
        let mut at = 0;
        while self.pending.len() - at >= block {
            let frame = self.pending[at..at + block].to_vec();
            self.encode(&frame)?;
            at += block;
        }
        self.pending.drain(..at);
        Ok(())
    }

    /// Encode and write one frame of interleaved samples (at most a block).
    fn encode(&mut self, interleaved: &[i32]) -> Result<()> {
        let path = self.path.clone();
        self.buf
            .fill_interleaved(interleaved)
            .map_err(|e| flac_err(&path, e))?;
        let frame =
            flacenc::encode_fixed_size_frame(&self.config, &self.buf.0, self.frames, &self.info)
                .map_err(|e| flac_err(&path, e))?;
        self.frames += 1;
        self.info.update_frame_info(&frame);
        let mut sink = ByteSink::new();
        frame.write(&mut sink).map_err(|e| flac_err(&path, e))?;
        self.file.write_all(sink.as_slice()).map_err(io(&path))
    }

    fn finish(mut self) -> Result<()> {
        if !self.pending.is_empty() {
            let rest = std::mem::take(&mut self.pending);
            self.encode(&rest)?;
        }
        let path = self.path.clone();
        self.info.set_md5_digest(&self.buf.1.md5_digest());
        self.info.set_total_samples(self.buf.1.total_samples());
        // A fixed-blocksize stream: the last, shorter block does not count as the minimum (as
        // libFLAC writes it; decoders rely on min = max to read the stream as fixed-size).
        self.info
            .set_block_sizes(FLAC_BLOCK, FLAC_BLOCK)
            .map_err(|e| flac_err(&path, e))?;
        let head = header(&path, &self.info)?;
        self.file.flush().map_err(io(&path))?;
        let mut f = self
            .file
            .into_inner()
            .map_err(|e| Error::io(&path, e.into_error()))?;
        f.seek(SeekFrom::Start(0)).map_err(io(&path))?;
        f.write_all(&head).map_err(io(&path))?;
        f.flush().map_err(io(&path))
    }
}

/// `fLaC` and the STREAMINFO block (always the same length, so the final one can overwrite the
/// placeholder).
fn header(path: &Path, info: &StreamInfo) -> Result<Vec<u8>> {
    let stream = Stream::with_stream_info(info.clone());
    let mut sink = ByteSink::new();
    stream.write(&mut sink).map_err(|e| flac_err(path, e))?;
    Ok(sink.as_slice().to_vec())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use flacenc::source::MemSource;

    fn names(output: &str, n: usize) -> Vec<String> {
        batch_paths(Path::new(output), n)
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect()
    }

    /// One item is written to the path exactly as given: several dots, none, dotted folders.
    #[test]
    fn a_single_output_is_used_exactly_as_given() {
        for given in [
            "my.song.v2.wav",
            "take.final.flac",
            "take",
            "out.d/take",
            "out.d/my.song.v2.flac",
            "a.b/c.d/e",
            ".hidden.wav",
        ] {
            assert_eq!(names(given, 1), [given], "{given}");
            assert_eq!(names(given, 0), [given], "{given}");
        }
    }

    /// A batch puts the index before the last extension of the file name only.
    #[test]
    fn batches_index_before_the_last_extension() {
        assert_eq!(
            names("my.song.v2.wav", 2),
            ["my.song.v2_0.wav", "my.song.v2_1.wav"]
        );
        assert_eq!(
            names("take.final.flac", 2),
            ["take.final_0.flac", "take.final_1.flac"]
        );
        assert_eq!(names("take", 2), ["take_0.wav", "take_1.wav"]);
        assert_eq!(
            names("out.d/take", 3),
            ["out.d/take_0.wav", "out.d/take_1.wav", "out.d/take_2.wav"]
        );
        assert_eq!(
            names("out.d/x.flac", 2),
            ["out.d/x_0.flac", "out.d/x_1.flac"]
        );
    }

    /// Frames written as they fill give the bytes of flacenc's whole-stream encoder.
    #[test]
    fn streamed_flac_is_the_whole_stream_encoding() {
        let (ch, n) = (2, 3 * FLAC_BLOCK + 123);
        let v: Vec<f32> = (0..ch * n)
            .map(|i| ((i as f32 * 0.013).sin() * 0.7) + ((i % 7) as f32 - 3.0) * 1e-3)
            .collect();
        let dir = aria_testing::TempDir::new("flac");
        let path = dir.join("streamed.flac");
        let mut w = AudioWriter::create(&path, ch, 44100, Depth::Float).unwrap();
        // In uneven pieces, as decode windows arrive.
        let a = Tensor::from_vec(v.clone(), &[ch, n]).unwrap();
        let mut at = 0;
        for k in [1000, 5000, 77, n] {
            let k = k.min(n - at);
            if k == 0 {
                break;
            }
            w.write(&a.narrow(1, at, k).unwrap().contiguous().unwrap())
                .unwrap();
            at += k;
        }
        w.finish().unwrap();
        let streamed = std::fs::read(&path).unwrap();

        let scale = ((1i64 << 23) - 1) as f32;
        let interleaved: Vec<i32> = (0..n)
            .flat_map(|i| (0..ch).map(move |c| (c, i)))
            .map(|(c, i)| (v[c * n + i].clamp(-1.0, 1.0) * scale).round() as i32)
            .collect();
        let cfg = flacenc::config::Encoder::default().into_verified().unwrap();
        let src = MemSource::from_samples(&interleaved, ch, 24, 44100);
        let mut s = flacenc::encode_with_fixed_block_size(&cfg, src, FLAC_BLOCK).unwrap();
        s.stream_info_mut()
            .set_block_sizes(FLAC_BLOCK, FLAC_BLOCK)
            .unwrap();
        let mut sink = ByteSink::new();
        s.write(&mut sink).unwrap();
        assert_eq!(streamed.len(), sink.as_slice().len());
        assert!(streamed == sink.as_slice());
    }
}
