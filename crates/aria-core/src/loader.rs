//! Weight loading: memory-mapped safetensors files (single or sharded) and a prefix-stack
//! loader in the spirit of candle's `VarBuilder`.
//!
//! ```no_run
//! # fn main() -> aria_core::Result<()> {
//! use aria_core::{DType, WeightLoader};
//! let loader = WeightLoader::open(&["model.safetensors"])?;
//! let dit = loader.pp("model.model");
//! let w = dit.get("transformer.layers.0.self_attn.to_qkv.weight", &[3072, 1024])?;
//! assert!(w.is_mapped() || w.dtype() == DType::F32);
//! # Ok(()) }
//! ```

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::Mmap;
use serde::Deserialize;

use crate::contiguous_strides;
use crate::nn::{PackedSource, PackedWeight};
use crate::storage::{release_range, Storage};
pub use crate::SafeTensorsErrorKind;
use crate::{CoreError, DType, Result, Tensor};

/// Where a tensor lives inside a safetensors file.
#[derive(Debug, Clone)]
pub struct TensorInfo {
    /// Element type.
    pub dtype: DType,
    /// Shape.
    pub shape: Vec<usize>,
    /// Absolute byte range inside the file.
    pub start: usize,
    /// End of the byte range (exclusive).
    pub end: usize,
}

/// One memory-mapped safetensors file, header validated.
#[derive(Debug)]
pub struct SafeTensorsFile {
    path: PathBuf,
    map: Arc<Mmap>,
    /// Whether `map` maps the file (its pages can be dropped and read again), rather than an
    /// anonymous copy ([`SafeTensorsFile::from_bytes`]).
    file_backed: bool,
    tensors: BTreeMap<String, TensorInfo>,
    metadata: HashMap<String, String>,
}

fn st_err(path: &Path, kind: SafeTensorsErrorKind, reason: impl Into<String>) -> CoreError {
    CoreError::SafeTensors {
        path: path.to_path_buf(),
        kind,
        reason: reason.into(),
    }
}

/// Largest header the safetensors format allows, in bytes.
pub const MAX_HEADER_LEN: u64 = 100_000_000;

/// Every dtype name the safetensors format defines (deserialized exactly as the reference
/// implementation does, so both accept the same headers).
#[derive(serde::Deserialize, Clone, Copy, Debug)]
#[allow(non_camel_case_types, clippy::upper_case_acronyms)]
enum StDtype {
    BOOL,
    F4,
    F6_E2M3,
    F6_E3M2,
    U8,
    I8,
    F8_E5M2,
    F8_E4M3,
    F8_E8M0,
    F8_E4M3FNUZ,
    F8_E5M2FNUZ,
    I16,
    U16,
    F16,
    BF16,
    I32,
    U32,
    F32,
    C64,
    F64,
    I64,
    U64,
}

impl StDtype {
    fn aria(self) -> Option<DType> {
        Some(match self {
            StDtype::F32 => DType::F32,
            StDtype::F16 => DType::F16,
            StDtype::BF16 => DType::BF16,
            StDtype::I8 => DType::I8,
            StDtype::U8 | StDtype::BOOL => DType::U8,
            StDtype::I64 => DType::I64,
            _ => return None,
        })
    }
}

/// A tensor entry as the safetensors format spells it (unknown fields are ignored, as the
/// reference implementation does).
#[derive(serde::Deserialize)]
struct StEntry<D> {
    dtype: D,
    shape: Vec<usize>,
    data_offsets: (usize, usize),
}

/// The whole header, with the reference implementation's structure and serde semantics (later
/// duplicate tensor names win; a repeated `__metadata__` is an error).
#[derive(serde::Deserialize)]
struct StHeader {
    #[serde(rename = "__metadata__")]
    metadata: Option<HashMap<String, String>>,
    #[serde(flatten)]
    tensors: BTreeMap<String, StEntry<StDtype>>,
}

fn unsupported(path: &Path, name: &str, dtype: String) -> CoreError {
    CoreError::UnsupportedDType {
        name: name.to_string(),
        file: path.display().to_string(),
        dtype,
    }
}

/// Why `text` failed the strict parse: names the tensor or key at fault when it can.
fn explain_header(path: &Path, text: &str, err: serde_json::Error) -> CoreError {
    use SafeTensorsErrorKind as K;
    let obj = match serde_json::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::Object(obj)) => obj,
        Ok(_) => return st_err(path, K::Header, "header is not a JSON object"),
        Err(e) => return st_err(path, K::Header, format!("header is not valid JSON: {e}")),
    };
    for (name, v) in &obj {
        if name == "__metadata__" {
            if let Err(e) = Option::<HashMap<String, String>>::deserialize(v) {
                return st_err(
                    path,
                    K::Header,
                    format!("`__metadata__` is not a map of strings: {e}"),
                );
            }
            continue;
        }
        let entry = match StEntry::<serde_json::Value>::deserialize(v) {
            Ok(entry) => entry,
            Err(e) => {
                return st_err(
                    path,
                    K::Header,
                    format!("tensor `{name}` has a malformed entry: {e}"),
                )
            }
        };
        if StDtype::deserialize(&entry.dtype).is_err() {
            return match entry.dtype {
                serde_json::Value::String(dt) => unsupported(path, name, dt),
                other => st_err(
                    path,
                    K::Header,
                    format!("tensor `{name}` has dtype {other}"),
                ),
            };
        }
    }
    st_err(path, K::Header, format!("malformed header: {err}"))
}

/// The tensor table of a safetensors header: tensor infos with absolute byte offsets, and the
/// `__metadata__` map.
pub type Header = (BTreeMap<String, TensorInfo>, HashMap<String, String>);

/// Parse and validate a safetensors file held in `bytes` (`path` only names it in errors).
///
/// Accepts exactly the files the reference `safetensors` implementation accepts, except those
/// holding a dtype aria does not handle ([`CoreError::UnsupportedDType`]): header length within
/// [`MAX_HEADER_LEN`] and the file, a UTF-8 JSON object of `{dtype, shape, data_offsets}` entries
/// plus an optional string-to-string `__metadata__`, byte lengths that match dtype × shape, and
/// tensor ranges that tile the data section back to back with nothing left over. Returns the
/// tensor table (absolute offsets) and the metadata. Never panics, whatever the bytes; every
/// error is a [`CoreError::SafeTensors`] whose [`SafeTensorsErrorKind`] says which rule broke
/// and whose message names the tensor involved.
pub fn parse_header(path: &Path, bytes: &[u8]) -> Result<Header> {
    use SafeTensorsErrorKind as K;
    let Some(n8) = bytes.first_chunk::<8>() else {
        return Err(st_err(
            path,
            K::TooSmall,
            format!(
                "file is {} bytes, shorter than the 8-byte header length",
                bytes.len()
            ),
        ));
    };
    let n = u64::from_le_bytes(*n8);
    if n > MAX_HEADER_LEN {
        return Err(st_err(
            path,
            K::HeaderTooLarge,
            format!("header length {n} exceeds the format limit of {MAX_HEADER_LEN} bytes"),
        ));
    }
    // n ≤ 1e8, so it fits a usize on every supported target.
    let n = n as usize;
    let data_start = 8 + n;
    let Some(header) = bytes.get(8..data_start) else {
        return Err(st_err(
            path,
            K::HeaderLength,
            format!(
                "header length {n} exceeds the {} bytes that follow it (truncated file?)",
                bytes.len() - 8
            ),
        ));
    };
    let text = std::str::from_utf8(header)
        .map_err(|e| st_err(path, K::Header, format!("header is not UTF-8: {e}")))?;
    let parsed: StHeader = serde_json::from_str(text).map_err(|e| explain_header(path, text, e))?;
    let data_len = bytes.len() - data_start;
    let mut tensors = BTreeMap::new();
    let metadata = parsed.metadata.unwrap_or_default();
    let mut ranges: Vec<(usize, usize, &str)> = Vec::with_capacity(parsed.tensors.len());
    for (name, raw) in &parsed.tensors {
        let dtype = raw
            .dtype
            .aria()
            .ok_or_else(|| unsupported(path, name, format!("{:?}", raw.dtype)))?;
        let (b, e) = raw.data_offsets;
        let shape = raw.shape.clone();
        let size = shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .and_then(|c| c.checked_mul(dtype.size()))
            .ok_or_else(|| {
                st_err(
                    path,
                    K::TensorSize,
                    format!("tensor `{name}` shape {shape:?} overflows"),
                )
            })?;
        if e < b {
            return Err(st_err(
                path,
                K::Offsets,
                format!("tensor `{name}` has reversed data_offsets [{b}, {e}]"),
            ));
        }
        if e - b != size {
            return Err(st_err(
                path,
                K::TensorSize,
                format!(
                    "tensor `{name}` ({dtype} {shape:?}) needs {size} bytes but data_offsets \
                     [{b}, {e}] span {}",
                    e - b
                ),
            ));
        }
        ranges.push((b, e, name.as_str()));
        tensors.insert(
            name.clone(),
            // Relative for now: made absolute once the ranges are known to lie in the file.
            TensorInfo {
                dtype,
                shape,
                start: b,
                end: e,
            },
        );
    }
    // The ranges must tile [0, end) back to back, in offset order.
    ranges.sort_unstable();
    let mut pos = 0usize;
    let mut prev = "";
    for &(b, e, name) in &ranges {
        if b != pos {
            let what = if b < pos {
                "overlaps"
            } else {
                "leaves a gap after"
            };
            let after = if prev.is_empty() {
                "the start of the data section".to_string()
            } else {
                format!("tensor `{prev}`")
            };
            return Err(st_err(
                path,
                K::Offsets,
                format!("tensor `{name}` (data_offsets [{b}, {e}]) {what} {after} (ends at {pos})"),
            ));
        }
        pos = e;
        prev = name;
    }
    if pos != data_len {
        let reason = if pos > data_len {
            format!(
                "tensors need a {pos}-byte data section but only {data_len} bytes follow the \
                 header (truncated file?); tensor `{prev}` ends at byte {pos}"
            )
        } else {
            let last = if prev.is_empty() {
                "the header".to_string()
            } else {
                format!("tensor `{prev}`, the last in the file,")
            };
            format!(
                "{} trailing bytes after {last} (appended garbage?)",
                data_len - pos
            )
        };
        return Err(st_err(path, K::DataLength, reason));
    }
    // Every range ends within the data section, so these additions cannot overflow.
    for info in tensors.values_mut() {
        info.start += data_start;
        info.end += data_start;
    }
    Ok((tensors, metadata))
}

impl SafeTensorsFile {
    /// Map a file and validate its header.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let file = std::fs::File::open(path).map_err(|source| CoreError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        // SAFETY: the mapping is read-only; aria never writes through it. Another process
        // truncating the file while it is mapped would be undefined behaviour, as with every
        // mmap-based loader; model files are treated as immutable.
        let map = unsafe { Mmap::map(&file) }.map_err(|source| CoreError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let (tensors, metadata) = parse_header(path, &map)?;
        Ok(SafeTensorsFile {
            path: path.to_path_buf(),
            map: Arc::new(map),
            file_backed: true,
            tensors,
            metadata,
        })
    }

    /// Validate a safetensors file held in memory (`name` only labels it in errors and in
    /// [`SafeTensorsFile::path`]). The bytes are copied once into an anonymous page-aligned
    /// mapping, so tensors are borrowed from it exactly as from a file.
    pub fn from_bytes(name: impl Into<PathBuf>, bytes: &[u8]) -> Result<Self> {
        let path = name.into();
        let (tensors, metadata) = parse_header(&path, bytes)?;
        let io = |source| CoreError::Io {
            path: path.clone(),
            source,
        };
        let mut map = memmap2::MmapMut::map_anon(bytes.len()).map_err(io)?;
        map.copy_from_slice(bytes);
        let map = map.make_read_only().map_err(io)?;
        Ok(SafeTensorsFile {
            path,
            map: Arc::new(map),
            file_backed: false,
            tensors,
            metadata,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The tensor table.
    pub fn tensors(&self) -> &BTreeMap<String, TensorInfo> {
        &self.tensors
    }

    /// The `__metadata__` map.
    pub fn metadata(&self) -> &HashMap<String, String> {
        &self.metadata
    }

    /// Drop the resident pages of tensor `name` from this process (`madvise(MADV_DONTNEED)` on
    /// the whole pages inside its byte range), e.g. once its packed form exists: the resident
    /// set shrinks at once. Tensors still viewing those bytes stay valid: the read-only file
    /// mapping reads them from the file again on the next access. Returns the bytes released
    /// (0 for an in-memory file, which has no file to read them from, and on platforms without
    /// `madvise`).
    pub fn release(&self, name: &str) -> Result<usize> {
        let info = self
            .tensors
            .get(name)
            .ok_or_else(|| CoreError::MissingTensor {
                name: name.to_string(),
                files: self.path.display().to_string(),
            })?;
        if !self.file_backed {
            return Ok(0);
        }
        release_range(&self.map, info.start, info.end)
    }

    /// The named tensor, borrowed from the map when aligned (copied otherwise).
    pub fn tensor(&self, name: &str) -> Result<Tensor> {
        let info = self
            .tensors
            .get(name)
            .ok_or_else(|| CoreError::MissingTensor {
                name: name.to_string(),
                files: self.path.display().to_string(),
            })?;
        let bytes = self.map.get(info.start..info.end).ok_or_else(|| {
            // parse_header guarantees every range lies inside the map.
            st_err(
                &self.path,
                SafeTensorsErrorKind::DataLength,
                format!("tensor `{name}` lies outside the file"),
            )
        })?;
        if (bytes.as_ptr() as usize).is_multiple_of(info.dtype.size()) {
            let storage = Storage::Mapped {
                map: self.map.clone(),
                start: info.start,
                len: info.end - info.start,
                dtype: info.dtype,
                file_backed: self.file_backed,
            };
            Tensor::from_storage(
                Arc::new(storage),
                info.dtype,
                info.shape.clone(),
                contiguous_strides(&info.shape),
                0,
            )
        } else {
            copy_tensor(bytes, info.dtype, &info.shape)
        }
    }
}

fn copy_tensor(bytes: &[u8], dtype: DType, shape: &[usize]) -> Result<Tensor> {
    fn go<T: crate::Elem>(b: &[u8], shape: &[usize]) -> Result<Tensor> {
        Tensor::from_vec(bytemuck::pod_collect_to_vec::<u8, T>(b), shape)
    }
    match dtype {
        DType::F32 => go::<f32>(bytes, shape),
        DType::F16 => go::<half::f16>(bytes, shape),
        DType::BF16 => go::<half::bf16>(bytes, shape),
        DType::I8 => go::<i8>(bytes, shape),
        DType::U8 => go::<u8>(bytes, shape),
        DType::I64 => go::<i64>(bytes, shape),
    }
}

#[derive(Debug)]
struct Files {
    files: Vec<SafeTensorsFile>,
    index: HashMap<String, usize>,
}

/// A prefix-stack view over one or more safetensors files (shards).
///
/// `pp("a").pp("b").get("c", shape)` reads tensor `a.b.c`, checking its shape. Tensors come back
/// in the dtype stored (borrowed from the map) unless [`WeightLoader::with_dtype`] asks for a
/// conversion.
#[derive(Debug, Clone)]
pub struct WeightLoader {
    files: Arc<Files>,
    prefix: String,
    dtype: Option<DType>,
    packed: Option<Arc<dyn PackedSource>>,
}

impl WeightLoader {
    /// Open and index a set of files (shards of one checkpoint). A tensor name present in two
    /// shards is an error.
    pub fn open<P: AsRef<Path>>(paths: &[P]) -> Result<Self> {
        let files = paths
            .iter()
            .map(SafeTensorsFile::open)
            .collect::<Result<Vec<_>>>()?;
        Self::from_files(files)
    }

    /// A loader over already opened files (shards of one checkpoint, e.g. built with
    /// [`SafeTensorsFile::from_bytes`]). A tensor name present in two files is an error.
    pub fn from_files(files: Vec<SafeTensorsFile>) -> Result<Self> {
        if files.is_empty() {
            return Err(CoreError::Invalid(
                "WeightLoader: no safetensors files given".into(),
            ));
        }
        let mut index = HashMap::new();
        for (i, f) in files.iter().enumerate() {
            for name in f.tensors.keys() {
                if let Some(prev) = index.insert(name.clone(), i) {
                    return Err(st_err(
                        &f.path,
                        SafeTensorsErrorKind::DuplicateTensor,
                        format!(
                            "tensor `{name}` also present in {}",
                            files[prev].path.display()
                        ),
                    ));
                }
            }
        }
        Ok(WeightLoader {
            files: Arc::new(Files { files, index }),
            prefix: String::new(),
            dtype: None,
            packed: None,
        })
    }

    /// Open a checkpoint given as a file, or as a `*.safetensors.index.json` shard index
    /// (`{"weight_map": {tensor name: shard file name}}`, shard names relative to the index's
    /// folder). Every tensor the index lists must be in the shard it names.
    pub fn open_checkpoint(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let is_index = path.to_string_lossy().ends_with(".index.json");
        if !is_index {
            return Self::open(&[path]);
        }
        let json_err = |reason: String| CoreError::Json {
            path: path.to_path_buf(),
            reason,
        };
        let v = crate::config::read_json(path)?;
        let map = v
            .get("weight_map")
            .and_then(|m| m.as_object())
            .ok_or_else(|| json_err("missing object `weight_map`".into()))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let mut wanted: Vec<(&str, PathBuf)> = Vec::with_capacity(map.len());
        for (name, f) in map {
            let f = f.as_str().ok_or_else(|| {
                json_err(format!("`weight_map` entry `{name}` is not a file name"))
            })?;
            let rel = Path::new(f);
            let plain = rel
                .components()
                .all(|c| matches!(c, std::path::Component::Normal(_)));
            if f.is_empty() || !plain {
                return Err(json_err(format!(
                    "`weight_map` entry `{name}`: shard `{f}` must be a relative path inside the \
                     index's folder"
                )));
            }
            wanted.push((name.as_str(), dir.join(rel)));
        }
        if wanted.is_empty() {
            return Err(json_err("`weight_map` is empty".into()));
        }
        let mut shards: Vec<PathBuf> = wanted.iter().map(|(_, p)| p.clone()).collect();
        shards.sort();
        shards.dedup();
        let loader = Self::open(&shards)?;
        for (name, shard) in &wanted {
            let found = loader
                .files
                .index
                .get(*name)
                .map(|&i| &loader.files.files[i].path);
            if found != Some(shard) {
                return Err(CoreError::MissingTensor {
                    name: name.to_string(),
                    files: format!("{} (as listed in {})", shard.display(), path.display()),
                });
            }
        }
        Ok(loader)
    }

    /// A loader whose names are relative to `self`'s prefix extended by `s`.
    pub fn pp(&self, s: impl AsRef<str>) -> WeightLoader {
        let s = s.as_ref();
        let prefix = if self.prefix.is_empty() {
            s.to_string()
        } else if s.is_empty() {
            self.prefix.clone()
        } else {
            format!("{}.{s}", self.prefix)
        };
        WeightLoader {
            files: self.files.clone(),
            prefix,
            dtype: self.dtype,
            packed: self.packed.clone(),
        }
    }

    /// A loader that converts every tensor it returns to `dtype` (`None`: keep the stored one).
    pub fn with_dtype(&self, dtype: Option<DType>) -> WeightLoader {
        WeightLoader {
            files: self.files.clone(),
            prefix: self.prefix.clone(),
            dtype,
            packed: self.packed.clone(),
        }
    }

    /// A loader whose layers take their weights from `source` where it has a packed form
    /// ([`crate::nn::Linear::load`] asks it first), so a pre-quantized checkpoint loads
    /// without reading any dense weight it replaces.
    pub fn with_packed(&self, source: Arc<dyn PackedSource>) -> WeightLoader {
        WeightLoader {
            packed: Some(source),
            ..self.clone()
        }
    }

    /// The packed form of the weight `name` (under the current prefix) with logical shape
    /// `[out, in]`, if a packed source is attached and holds one.
    pub fn packed_weight(
        &self,
        name: &str,
        shape: [usize; 2],
    ) -> Result<Option<Arc<dyn PackedWeight>>> {
        match &self.packed {
            Some(src) => src.packed(&self.full_name(name), shape),
            None => Ok(None),
        }
    }

    /// Drop the resident pages of tensor `name` (under the current prefix); see
    /// [`SafeTensorsFile::release`]. Returns the bytes released.
    pub fn release(&self, name: &str) -> Result<usize> {
        let full = self.full_name(name);
        let (f, _) = self.locate(&full)?;
        f.release(&full)
    }

    /// The current prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The full name of `name` under the current prefix.
    pub fn full_name(&self, name: &str) -> String {
        if self.prefix.is_empty() {
            name.to_string()
        } else {
            format!("{}.{name}", self.prefix)
        }
    }

    /// Whether `name` exists under the current prefix.
    pub fn contains(&self, name: &str) -> bool {
        self.files.index.contains_key(&self.full_name(name))
    }

    /// Names (relative to the prefix) of every tensor under the current prefix, sorted.
    pub fn names(&self) -> Vec<String> {
        let p = if self.prefix.is_empty() {
            String::new()
        } else {
            format!("{}.", self.prefix)
        };
        let mut v: Vec<String> = self
            .files
            .index
            .keys()
            .filter_map(|k| k.strip_prefix(&p).map(str::to_string))
            .collect();
        v.sort();
        v
    }

    /// The file that holds `name` and its tensor info.
    pub fn info(&self, name: &str) -> Result<(&Path, &TensorInfo)> {
        let full = self.full_name(name);
        let (f, info) = self.locate(&full)?;
        Ok((&f.path, info))
    }

    fn locate(&self, full: &str) -> Result<(&SafeTensorsFile, &TensorInfo)> {
        let f = self
            .files
            .index
            .get(full)
            .and_then(|&i| self.files.files.get(i));
        f.and_then(|f| f.tensors.get(full).map(|info| (f, info)))
            .ok_or_else(|| self.missing(full))
    }

    fn missing(&self, full: &str) -> CoreError {
        CoreError::MissingTensor {
            name: full.to_string(),
            files: self
                .files
                .files
                .iter()
                .map(|f| f.path.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        }
    }

    /// The tensor `name` with any shape, in the loader's dtype policy (see
    /// [`WeightLoader::with_dtype`]; only float dtypes convert).
    pub fn get_any(&self, name: &str) -> Result<Tensor> {
        let full = self.full_name(name);
        let (f, _) = self.locate(&full)?;
        let t = f.tensor(&full)?;
        match self.dtype {
            Some(d) if d != t.dtype() => {
                if !t.dtype().is_float() || !d.is_float() {
                    return Err(CoreError::WeightDType {
                        name: full,
                        file: f.path.display().to_string(),
                        expected: format!("{d} (only float dtypes convert)"),
                        found: t.dtype(),
                    });
                }
                t.to_dtype(d)
            }
            _ => Ok(t),
        }
    }

    /// The tensor `name`, which must have shape `shape`.
    pub fn get(&self, name: &str, shape: &[usize]) -> Result<Tensor> {
        let full = self.full_name(name);
        let (f, info) = self.locate(&full)?;
        if info.shape != shape {
            return Err(CoreError::WeightShape {
                name: full,
                file: f.path.display().to_string(),
                expected: shape.to_vec(),
                found: info.shape.clone(),
            });
        }
        self.get_any(name)
    }

    /// The tensor `name` with shape `shape`, converted to `dtype` (float dtypes only).
    pub fn get_as(&self, name: &str, shape: &[usize], dtype: DType) -> Result<Tensor> {
        self.with_dtype(Some(dtype)).get(name, shape)
    }

    /// The tensor `name` with shape `shape`, which must be stored as `dtype` (no conversion;
    /// for packed integer data).
    pub fn get_exact(&self, name: &str, shape: &[usize], dtype: DType) -> Result<Tensor> {
        let full = self.full_name(name);
        let (f, info) = self.locate(&full)?;
        if info.dtype != dtype {
            return Err(CoreError::WeightDType {
                name: full,
                file: f.path.display().to_string(),
                expected: dtype.to_string(),
                found: info.dtype,
            });
        }
        self.with_dtype(None).get(name, shape)
    }

    /// Metadata of the file that holds `name`.
    pub fn file_metadata(&self, name: &str) -> Result<&HashMap<String, String>> {
        let full = self.full_name(name);
        Ok(&self.locate(&full)?.0.metadata)
    }
}

/// Write tensors to a safetensors file (f32/f16/bf16/i8/u8/i64), with optional metadata.
///
/// Strided and device tensors are written as their contiguous CPU copies; data is laid out
/// widest dtype first so that every tensor is aligned when the file is mapped again. Repeated
/// names and the reserved name `__metadata__` are refused.
pub fn save_safetensors(
    path: impl AsRef<Path>,
    tensors: &[(&str, &Tensor)],
    metadata: Option<&HashMap<String, String>>,
) -> Result<()> {
    let path = path.as_ref();
    let mut header = serde_json::Map::new();
    if let Some(m) = metadata {
        let mm: serde_json::Map<String, serde_json::Value> = m
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
            .collect();
        header.insert("__metadata__".into(), serde_json::Value::Object(mm));
    }
    let mut datas = Vec::new();
    let mut off = 0usize;
    // Widest elements first: with the header padded to 8 bytes, every tensor is then aligned
    // for its dtype and maps without a copy when read back.
    let mut order: Vec<&(&str, &Tensor)> = tensors.iter().collect();
    order.sort_by_key(|(_, t)| std::cmp::Reverse(t.dtype().size()));
    for (name, t) in order {
        if *name == "__metadata__" || header.contains_key(*name) {
            return Err(st_err(
                path,
                SafeTensorsErrorKind::Write,
                format!("tensor name `{name}` is reserved or repeated"),
            ));
        }
        let t = t.to_cpu()?.contiguous()?;
        let bytes = t.as_bytes()?.to_vec();
        header.insert(
            name.to_string(),
            serde_json::json!({
                "dtype": t.dtype().safetensors_name(),
                "shape": t.shape(),
                "data_offsets": [off, off + bytes.len()],
            }),
        );
        off += bytes.len();
        datas.push(bytes);
    }
    let mut h = serde_json::to_vec(&serde_json::Value::Object(header))
        .map_err(|e| st_err(path, SafeTensorsErrorKind::Write, e.to_string()))?;
    while (h.len() + 8) % 8 != 0 {
        h.push(b' ');
    }
    let mut out = Vec::with_capacity(8 + h.len() + off);
    out.extend_from_slice(&(h.len() as u64).to_le_bytes());
    out.extend_from_slice(&h);
    for d in datas {
        out.extend_from_slice(&d);
    }
    std::fs::write(path, out).map_err(|source| CoreError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Pure header-parsing checks (no files, no mapping), small enough to run under miri.
#[cfg(test)]
mod tests {
    use super::*;

    fn build(header: &str, data: &[u8]) -> Vec<u8> {
        let mut v = (header.len() as u64).to_le_bytes().to_vec();
        v.extend_from_slice(header.as_bytes());
        v.extend_from_slice(data);
        v
    }

    fn kind(r: Result<Header>) -> Option<SafeTensorsErrorKind> {
        match r {
            Err(CoreError::SafeTensors { kind, .. }) => Some(kind),
            _ => None,
        }
    }

    const GOOD: &str = r#"{"__metadata__":{"k":"v"},"b":{"dtype":"BF16","shape":[2],"data_offsets":[8,12]},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"z":{"dtype":"U8","shape":[0,3],"data_offsets":[12,12]}}"#;

    #[test]
    fn parses_and_rejects_every_truncation() {
        let p = Path::new("t.safetensors");
        let bytes = build(GOOD, &[7; 12]);
        let (t, m) = parse_header(p, &bytes).expect("valid");
        let start = 8 + GOOD.len();
        assert_eq!(m["k"], "v");
        assert_eq!((t["a"].start, t["a"].end), (start, start + 8));
        assert_eq!(
            (t["b"].dtype, t["b"].shape.as_slice()),
            (DType::BF16, &[2][..])
        );
        assert_eq!((t["z"].start, t["z"].end), (start + 12, start + 12));
        for cut in 0..bytes.len() {
            let k = kind(parse_header(p, &bytes[..cut])).expect("typed error");
            let want = match cut {
                0..=7 => SafeTensorsErrorKind::TooSmall,
                c if c < start => SafeTensorsErrorKind::HeaderLength,
                _ => SafeTensorsErrorKind::DataLength,
            };
            assert_eq!(k, want, "cut at {cut}");
        }
        let mut long = bytes.clone();
        long.push(0);
        assert_eq!(
            kind(parse_header(p, &long)),
            Some(SafeTensorsErrorKind::DataLength)
        );
    }

    #[test]
    fn never_panics_on_flipped_bytes() {
        let p = Path::new("t.safetensors");
        let bytes = build(GOOD, &[7; 12]);
        for pos in 0..bytes.len() {
            for mask in [0x01u8, 0x80] {
                let mut b = bytes.clone();
                b[pos] ^= mask;
                if let Err(e) = parse_header(p, &b) {
                    assert!(e.to_string().contains("t.safetensors"), "{e}");
                }
            }
        }
    }

    #[test]
    fn hostile_layouts() {
        let p = Path::new("t.safetensors");
        let k = |h: &str, n: usize| kind(parse_header(p, &build(h, &vec![0; n])));
        let e = |s: &str| format!(r#"{{"t":{{"dtype":"F32","shape":[1],"data_offsets":{s}}}}}"#);
        assert_eq!(k(&e("[4,0]"), 4), Some(SafeTensorsErrorKind::Offsets));
        assert_eq!(k(&e("[4,8]"), 8), Some(SafeTensorsErrorKind::Offsets));
        assert_eq!(k(&e("[0,8]"), 8), Some(SafeTensorsErrorKind::TensorSize));
        assert_eq!(
            k(&e("[18446744073709551611,18446744073709551615]"), 4),
            Some(SafeTensorsErrorKind::Offsets)
        );
        assert_eq!(k("[]", 0), Some(SafeTensorsErrorKind::Header));
        let big = r#"{"t":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}}"#;
        assert_eq!(k(big, 0), Some(SafeTensorsErrorKind::TensorSize));
        let mut huge = u64::MAX.to_le_bytes().to_vec();
        huge.extend_from_slice(b"{}");
        assert_eq!(
            kind(parse_header(p, &huge)),
            Some(SafeTensorsErrorKind::HeaderTooLarge)
        );
        let q = r#"{"t":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]}}"#;
        assert!(matches!(
            parse_header(p, &build(q, &[0])),
            Err(CoreError::UnsupportedDType { .. })
        ));
    }
}
