//! Packed safetensors files: pre-quantized weights that load without any f32 weight.
//!
//! A packed file is an ordinary safetensors file:
//! - each packed weight is a `U8 [rows, row_bytes]` tensor of blocks, under the weight's own
//!   name (e.g. `…to_qkv.weight`);
//! - dense tensors (biases, norms, weights a policy keeps dense) are stored as they are;
//! - `__metadata__` holds [`META_VERSION`] (the container version, [`CONTAINER_VERSION`]),
//!   [`META_POLICY`], [`META_SOURCE`] (a checksum of the weights it was made from, compared by
//!   [`PackedFile::check_source`]), optionally [`META_DECODER`] (the format of the
//!   autoencoder decoder's packed matrices) and [`META_TABLE`], a JSON object
//!   `{name: {"format": "q4_k/v1", "shape": [out, in], "xxh64": "<16 hex digits>"}}`.
//!
//! [`write_packed_stream`] writes one tensor at a time (the header is laid out first from
//! the declared shapes), so a whole model is never held in memory.
//!
//! Reading checks every rule and names what breaks it: an unknown container version or format
//! tag, a table entry without its tensor or with the wrong dtype or byte shape, a tensor whose
//! bytes do not match their checksum ([`QuantError::Checksum`]), a file made from other
//! weights ([`QuantError::SourceMismatch`]); a truncated or malformed file fails in the
//! safetensors parser ([`aria_core::CoreError::SafeTensors`]).

use std::collections::{BTreeMap, HashMap};
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use std::sync::Arc;

use aria_core::nn::{PackedSource, PackedWeight};
use aria_core::{DType, SafeTensorsFile, Tensor};
use serde_json::{json, Value};

use crate::{xxh64, Compute, Format, PackedMatrix, QuantError, Result};

/// Version of the packed-file container (the metadata keys and the table).
pub const CONTAINER_VERSION: u32 = 1;
/// Metadata key: container version.
pub const META_VERSION: &str = "aria.quant.version";
/// Metadata key: the policy the file was made with.
pub const META_POLICY: &str = "aria.quant.policy";
/// Metadata key: checksum of the source weights.
pub const META_SOURCE: &str = "aria.quant.source";
/// Metadata key (optional): the format the autoencoder decoder's matrices are packed in
/// (e.g. `q8_0`); absent when they are stored dense.
pub const META_DECODER: &str = "aria.quant.decoder";
/// Metadata key: the packed-tensor table.
pub const META_TABLE: &str = "aria.quant.tensors";

/// Largest dimension a packed table entry may declare.
const MAX_DIM: usize = 1 << 32;

/// What a packed file records about how it was made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackMeta {
    /// The policy name (e.g. `q4-mixed`).
    pub policy: String,
    /// Checksum of the source weights (the writer chooses how; e.g. [`xxh64`] of the source
    /// file as 16 hex digits).
    pub source: String,
    /// The format of the autoencoder decoder's packed matrices ([`META_DECODER`]), if they
    /// are packed.
    pub decoder: Option<String>,
}

/// One tensor to write.
#[derive(Debug, Clone, Copy)]
pub enum Entry<'a> {
    /// A packed weight.
    Packed(&'a PackedMatrix),
    /// A dense tensor, written as it is.
    Dense(&'a Tensor),
}

/// A packed tensor's table entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableEntry {
    /// Its format.
    pub format: Format,
    /// Logical shape `[out, in]`.
    pub shape: [usize; 2],
    /// XXH64 of its bytes.
    pub xxh64: u64,
}

/// Write `entries` and `meta` as a packed safetensors file (through [`write_packed_stream`]:
/// the file's bytes are the same, and only one tensor's bytes are copied at a time).
pub fn write_packed(
    path: impl AsRef<Path>,
    entries: &[(&str, Entry<'_>)],
    meta: &PackMeta,
) -> Result<()> {
    let specs: Vec<(String, Spec)> = entries
        .iter()
        .map(|(name, e)| {
            let spec = match e {
                Entry::Packed(p) => Spec::Packed {
                    format: p.format(),
                    shape: [p.rows(), p.cols()],
                },
                Entry::Dense(t) => Spec::Dense {
                    dtype: t.dtype(),
                    shape: t.shape().to_vec(),
                },
            };
            (name.to_string(), spec)
        })
        .collect();
    let mut produce = |i: usize| -> Result<Item> {
        Ok(match entries[i].1 {
            Entry::Packed(p) => Item::Packed(p.clone()),
            Entry::Dense(t) => Item::Dense(t.clone()),
        })
    };
    write_packed_stream(path, &specs, meta, &mut produce, &mut |_| Ok(()))
}

/// What a streamed tensor will be, declared before its bytes exist
/// ([`write_packed_stream`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Spec {
    /// A packed weight: its format and logical shape `[out, in]` (stored as
    /// `U8 [out, row_bytes]`).
    Packed {
        /// The format.
        format: Format,
        /// Logical shape `[out, in]`.
        shape: [usize; 2],
    },
    /// A dense tensor, written as it is.
    Dense {
        /// Its dtype.
        dtype: DType,
        /// Its shape.
        shape: Vec<usize>,
    },
}

impl Spec {
    /// The stored dtype, shape and byte size.
    fn stored(&self) -> (DType, Vec<usize>, usize) {
        match self {
            Spec::Packed { format, shape } => {
                let rb = format.row_bytes(shape[1]);
                (DType::U8, vec![shape[0], rb], shape[0] * rb)
            }
            Spec::Dense { dtype, shape } => (
                *dtype,
                shape.clone(),
                shape.iter().product::<usize>() * dtype.size(),
            ),
        }
    }
}

/// One streamed tensor's content, produced when the writer reaches it.
#[derive(Debug, Clone)]
pub enum Item {
    /// A packed weight.
    Packed(PackedMatrix),
    /// A dense tensor.
    Dense(Tensor),
}

/// The metadata map of a packed file whose packed tensors have the checksums `sums` (one per
/// spec; dense ones unused), in the order `write_packed` always wrote it.
fn metadata(specs: &[(String, Spec)], sums: &[u64], meta: &PackMeta) -> HashMap<String, String> {
    let mut table = serde_json::Map::new();
    for ((name, spec), sum) in specs.iter().zip(sums) {
        if let Spec::Packed { format, shape } = spec {
            table.insert(
                name.clone(),
                json!({
                    "format": format.tag(),
                    "shape": [shape[0], shape[1]],
                    "xxh64": format!("{sum:016x}"),
                }),
            );
        }
    }
    let mut md = HashMap::new();
    md.insert(META_VERSION.to_string(), CONTAINER_VERSION.to_string());
    md.insert(META_POLICY.to_string(), meta.policy.clone());
    md.insert(META_SOURCE.to_string(), meta.source.clone());
    if let Some(d) = &meta.decoder {
        md.insert(META_DECODER.to_string(), d.clone());
    }
    md.insert(META_TABLE.to_string(), Value::Object(table).to_string());
    md
}

/// The safetensors header (padded so the data starts 8-byte aligned) of `specs` laid out in
/// `order`, with metadata `md`: the layout of [`aria_core::save_safetensors`].
fn header(
    path: &Path,
    specs: &[(String, Spec)],
    order: &[usize],
    md: &HashMap<String, String>,
) -> Result<Vec<u8>> {
    let mut header = serde_json::Map::new();
    let mm: serde_json::Map<String, Value> = md
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    header.insert("__metadata__".into(), Value::Object(mm));
    let mut off = 0usize;
    for &i in order {
        let name = &specs[i].0;
        if name == "__metadata__" || header.contains_key(name) {
            return Err(file_err(
                path,
                format!("tensor name `{name}` is reserved or repeated"),
            ));
        }
        let (dtype, shape, n) = specs[i].1.stored();
        header.insert(
            name.clone(),
            json!({
                "dtype": dtype.safetensors_name(),
                "shape": shape,
                "data_offsets": [off, off + n],
            }),
        );
        off += n;
    }
    let mut h = serde_json::to_vec(&Value::Object(header))
        .map_err(|e| file_err(path, format!("header: {e}")))?;
    while !(h.len() + 8).is_multiple_of(8) {
        h.push(b' ');
    }
    Ok(h)
}

/// Write a packed safetensors file one tensor at a time: the header is laid out from `specs`
/// (names, formats, dtypes, shapes) before any tensor exists; then `produce(i)` makes tensor
/// `i`, which is checked against its spec, written (its checksum taken) and dropped, and
/// `written(i)` runs (e.g. to release the pages of its source). The checksums are filled into
/// the header last (they have a fixed width). Tensors are produced in file order (widest
/// dtype first, then as listed). The file is the one [`write_packed`] writes for the same
/// tensors; it is written under a temporary name next to `path` and renamed when complete.
pub fn write_packed_stream(
    path: impl AsRef<Path>,
    specs: &[(String, Spec)],
    meta: &PackMeta,
    produce: &mut dyn FnMut(usize) -> Result<Item>,
    written: &mut dyn FnMut(usize) -> Result<()>,
) -> Result<()> {
    let path = path.as_ref();
    // Widest elements first, stable, as `save_safetensors` lays them out.
    let mut order: Vec<usize> = (0..specs.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(specs[i].1.stored().0.size()));
    let mut sums = vec![0u64; specs.len()];
    let first = header(path, specs, &order, &metadata(specs, &sums, meta))?;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|source| QuantError::Io {
            path: parent.to_path_buf(),
            source,
        })?;
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let part = path.with_file_name(format!(".{name}.partial"));
    let r = stream(&part, specs, &order, &first, &mut sums, produce, written).and_then(|mut f| {
        let h = header(path, specs, &order, &metadata(specs, &sums, meta))?;
        if h.len() != first.len() {
            return Err(file_err(path, "header changed size while writing"));
        }
        let io = |source| QuantError::Io {
            path: part.clone(),
            source,
        };
        f.seek(SeekFrom::Start(8)).map_err(io)?;
        f.write_all(&h).map_err(io)?;
        f.flush().map_err(io)?;
        drop(f);
        std::fs::rename(&part, path).map_err(|source| QuantError::Io {
            path: path.to_path_buf(),
            source,
        })
    });
    if r.is_err() {
        let _ = std::fs::remove_file(&part);
    }
    r
}

/// Write the provisional header and every tensor's bytes to `part`; returns the open file.
fn stream(
    part: &Path,
    specs: &[(String, Spec)],
    order: &[usize],
    h: &[u8],
    sums: &mut [u64],
    produce: &mut dyn FnMut(usize) -> Result<Item>,
    written: &mut dyn FnMut(usize) -> Result<()>,
) -> Result<std::io::BufWriter<std::fs::File>> {
    let io = |source| QuantError::Io {
        path: part.to_path_buf(),
        source,
    };
    let f = std::fs::File::create(part).map_err(io)?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
    w.write_all(&(h.len() as u64).to_le_bytes()).map_err(io)?;
    w.write_all(h).map_err(io)?;
    for &i in order {
        let (name, spec) = &specs[i];
        let item = produce(i)?;
        let mismatch = |found: String| {
            file_err(
                part,
                format!("tensor `{name}` was declared {spec:?} but produced {found}"),
            )
        };
        match (&item, spec) {
            (Item::Packed(p), Spec::Packed { format, shape }) => {
                if p.format() != *format || [p.rows(), p.cols()] != *shape {
                    return Err(mismatch(format!(
                        "{} [{}, {}]",
                        p.format().tag(),
                        p.rows(),
                        p.cols()
                    )));
                }
                let b = p.bytes()?;
                sums[i] = xxh64(b);
                w.write_all(b).map_err(io)?;
            }
            (Item::Dense(t), Spec::Dense { dtype, shape }) => {
                if t.dtype() != *dtype || t.shape() != shape.as_slice() {
                    return Err(mismatch(format!("{} {:?}", t.dtype(), t.shape())));
                }
                let t = t.to_cpu()?.contiguous()?;
                w.write_all(t.as_bytes()?).map_err(io)?;
            }
            (Item::Packed(_), _) => return Err(mismatch("a packed weight".into())),
            (Item::Dense(_), _) => return Err(mismatch("a dense tensor".into())),
        }
        drop(item);
        written(i)?;
    }
    w.flush().map_err(io)?;
    Ok(w)
}

/// A packed safetensors file, validated on opening (metadata, table, tensor dtypes and byte
/// shapes); checksums are checked when a packed tensor is read.
#[derive(Debug)]
pub struct PackedFile {
    path: PathBuf,
    file: SafeTensorsFile,
    meta: PackMeta,
    table: BTreeMap<String, TableEntry>,
}

fn file_err(path: &Path, reason: impl Into<String>) -> QuantError {
    QuantError::File {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

fn parse_entry(path: &Path, name: &str, v: &Value) -> Result<TableEntry> {
    let bad = |what: &str| file_err(path, format!("{META_TABLE} entry `{name}`: {what}"));
    let obj = v.as_object().ok_or_else(|| bad("not an object"))?;
    let tag = obj
        .get("format")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("no string `format`"))?;
    let format = Format::from_tag(tag).map_err(|e| bad(&e.to_string()))?;
    let dims: Vec<usize> = obj
        .get("shape")
        .and_then(Value::as_array)
        .and_then(|a| {
            a.iter()
                .map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok()))
                .collect::<Option<Vec<_>>>()
        })
        .ok_or_else(|| bad("`shape` is not an array of integers"))?;
    let shape: [usize; 2] = dims
        .as_slice()
        .try_into()
        .map_err(|_| bad(&format!("`shape` {dims:?} is not [out, in]")))?;
    if shape.iter().any(|&d| d > MAX_DIM) {
        return Err(bad(&format!("`shape` {shape:?} exceeds {MAX_DIM}")));
    }
    let hex = obj
        .get("xxh64")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("no string `xxh64`"))?;
    let xxh64 = (hex.len() == 16)
        .then(|| u64::from_str_radix(hex, 16).ok())
        .flatten()
        .ok_or_else(|| bad(&format!("`xxh64` {hex:?} is not 16 hex digits")))?;
    Ok(TableEntry {
        format,
        shape,
        xxh64,
    })
}

impl PackedFile {
    /// Map and validate a packed file.
    pub fn open(path: impl AsRef<Path>) -> Result<PackedFile> {
        PackedFile::from_file(SafeTensorsFile::open(path)?)
    }

    /// Validate an opened safetensors file as a packed file.
    pub fn from_file(file: SafeTensorsFile) -> Result<PackedFile> {
        let path = file.path().to_path_buf();
        let md = file.metadata();
        let get = |k: &str| {
            md.get(k).ok_or_else(|| {
                file_err(
                    &path,
                    format!("not a packed file: metadata `{k}` is missing"),
                )
            })
        };
        let version = get(META_VERSION)?;
        if version.parse::<u32>().ok() != Some(CONTAINER_VERSION) {
            return Err(file_err(
                &path,
                format!(
                    "packed container version {version:?}; this build reads version {CONTAINER_VERSION}"
                ),
            ));
        }
        let meta = PackMeta {
            policy: get(META_POLICY)?.clone(),
            source: get(META_SOURCE)?.clone(),
            decoder: md.get(META_DECODER).cloned(),
        };
        let raw: Value = serde_json::from_str(get(META_TABLE)?)
            .map_err(|e| file_err(&path, format!("{META_TABLE} is not JSON: {e}")))?;
        let obj = raw
            .as_object()
            .ok_or_else(|| file_err(&path, format!("{META_TABLE} is not a JSON object")))?;
        let mut table = BTreeMap::new();
        for (name, v) in obj {
            let e = parse_entry(&path, name, v)?;
            let info = file.tensors().get(name).ok_or_else(|| {
                file_err(
                    &path,
                    format!("packed tensor `{name}` is in the table but not in the file"),
                )
            })?;
            let rb = e.format.row_bytes(e.shape[1]);
            if info.dtype != DType::U8 || info.shape != [e.shape[0], rb] {
                return Err(file_err(
                    &path,
                    format!(
                        "packed tensor `{name}` ({} {:?}) is stored as {} {:?}, expected U8 [{}, {rb}]",
                        e.format.tag(),
                        e.shape,
                        info.dtype,
                        info.shape,
                        e.shape[0]
                    ),
                ));
            }
            table.insert(name.clone(), e);
        }
        Ok(PackedFile {
            path,
            file,
            meta,
            table,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Policy and source checksum.
    pub fn meta(&self) -> &PackMeta {
        &self.meta
    }

    /// The packed-tensor table.
    pub fn table(&self) -> &BTreeMap<String, TableEntry> {
        &self.table
    }

    /// Every tensor name in the file (packed and dense).
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.file.tensors().keys().map(String::as_str)
    }

    /// Whether `name` is a packed tensor.
    pub fn is_packed(&self, name: &str) -> bool {
        self.table.contains_key(name)
    }

    /// Refuse a file made from other weights than `expected` (the model's source checksum).
    pub fn check_source(&self, expected: &str) -> Result<()> {
        if self.meta.source != expected {
            return Err(QuantError::SourceMismatch {
                path: self.path.clone(),
                expected: expected.to_string(),
                found: self.meta.source.clone(),
            });
        }
        Ok(())
    }

    /// Refuse a file made with another policy than `expected`.
    pub fn check_policy(&self, expected: &str) -> Result<()> {
        if self.meta.policy != expected {
            return Err(file_err(
                &self.path,
                format!(
                    "packed with policy `{}`, expected `{expected}`",
                    self.meta.policy
                ),
            ));
        }
        Ok(())
    }

    /// The packed tensor `name` (borrowed from the mapping), after checking its checksum and,
    /// with `expected`, its `[out, in]` shape.
    pub fn packed(&self, name: &str, expected: Option<[usize; 2]>) -> Result<PackedMatrix> {
        let e = self
            .table
            .get(name)
            .ok_or_else(|| file_err(&self.path, format!("no packed tensor `{name}`")))?;
        if let Some(want) = expected {
            if want != e.shape {
                return Err(file_err(
                    &self.path,
                    format!("packed tensor `{name}` is {:?}, expected {want:?}", e.shape),
                ));
            }
        }
        let t = self.file.tensor(name)?;
        let found = xxh64(t.as_bytes()?);
        if found != e.xxh64 {
            return Err(QuantError::Checksum {
                path: self.path.clone(),
                tensor: name.to_string(),
                expected: e.xxh64,
                found,
            });
        }
        PackedMatrix::from_tensor(e.format, e.shape[0], e.shape[1], t)
    }

    /// The dense tensor `name` (borrowed from the mapping when aligned).
    pub fn dense(&self, name: &str) -> Result<Tensor> {
        if self.is_packed(name) {
            return Err(file_err(
                &self.path,
                format!("tensor `{name}` is packed; read it with `packed`"),
            ));
        }
        Ok(self.file.tensor(name)?)
    }
}

/// A [`PackedFile`] as the packed source of a model loader
/// ([`aria_core::WeightLoader::with_packed`]): layers whose weight the file holds packed get it
/// (checksum and shape checked, bytes borrowed from the mapping), computing in `compute` mode
/// where the format supports it (W8A8 on `q8_0`; other formats stay weight-only).
#[derive(Debug)]
pub struct PackedFileSource {
    file: PackedFile,
    compute: Compute,
}

impl PackedFileSource {
    /// A source over `file` computing in `compute` mode.
    pub fn new(file: PackedFile, compute: Compute) -> PackedFileSource {
        PackedFileSource { file, compute }
    }

    /// The packed file.
    pub fn file(&self) -> &PackedFile {
        &self.file
    }
}

impl PackedSource for PackedFileSource {
    fn packed(
        &self,
        name: &str,
        shape: [usize; 2],
    ) -> aria_core::Result<Option<Arc<dyn PackedWeight>>> {
        if !self.file.is_packed(name) {
            return Ok(None);
        }
        let m = self.file.packed(name, Some(shape))?;
        let m = if self.compute.supports(m.format()) {
            m.with_compute(self.compute)?
        } else {
            m
        };
        Ok(Some(Arc::new(m)))
    }
}
