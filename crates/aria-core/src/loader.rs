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

use crate::storage::Storage;
use crate::tensor::contiguous_strides;
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
    tensors: BTreeMap<String, TensorInfo>,
    metadata: HashMap<String, String>,
}

fn st_err(path: &Path, reason: impl Into<String>) -> CoreError {
    CoreError::SafeTensors { path: path.to_path_buf(), reason: reason.into() }
}

/// Parse and validate a safetensors header. Returns the tensor table (with absolute offsets) and
/// the `__metadata__` map. Never panics, whatever the bytes.
pub fn parse_header(
    path: &Path,
    bytes: &[u8],
) -> Result<(BTreeMap<String, TensorInfo>, HashMap<String, String>)> {
    if bytes.len() < 8 {
        return Err(st_err(path, format!("file is {} bytes, shorter than the 8-byte header length", bytes.len())));
    }
    let mut n8 = [0u8; 8];
    n8.copy_from_slice(&bytes[..8]);
    let n = u64::from_le_bytes(n8);
    let avail = (bytes.len() - 8) as u64;
    if n > avail {
        return Err(st_err(path, format!("header length {n} exceeds the {avail} bytes that follow (truncated file?)")));
    }
    if n > 100 * 1024 * 1024 {
        return Err(st_err(path, format!("header length {n} is absurdly large")));
    }
    let header = &bytes[8..8 + n as usize];
    let json: serde_json::Value = serde_json::from_slice(header)
        .map_err(|e| st_err(path, format!("header is not valid JSON: {e}")))?;
    let obj = json.as_object().ok_or_else(|| st_err(path, "header is not a JSON object"))?;
    let data_start = 8 + n as usize;
    let data_len = bytes.len() - data_start;
    let mut tensors = BTreeMap::new();
    let mut metadata = HashMap::new();
    let mut ranges: Vec<(usize, usize, &str)> = Vec::new();
    for (name, v) in obj {
        if name == "__metadata__" {
            if let Some(m) = v.as_object() {
                for (k, v) in m {
                    let s = v.as_str().ok_or_else(|| st_err(path, format!("metadata `{k}` is not a string")))?;
                    metadata.insert(k.clone(), s.to_string());
                }
            } else {
                return Err(st_err(path, "__metadata__ is not an object"));
            }
            continue;
        }
        let entry = v.as_object().ok_or_else(|| st_err(path, format!("entry `{name}` is not an object")))?;
        let dt = entry
            .get("dtype")
            .and_then(|d| d.as_str())
            .ok_or_else(|| st_err(path, format!("tensor `{name}` has no dtype")))?;
        let dtype = match dt {
            "F32" => DType::F32,
            "F16" => DType::F16,
            "BF16" => DType::BF16,
            "I8" => DType::I8,
            "U8" | "BOOL" => DType::U8,
            "I64" => DType::I64,
            other => {
                return Err(CoreError::UnsupportedDType {
                    name: name.clone(),
                    file: path.display().to_string(),
                    dtype: other.to_string(),
                })
            }
        };
        let shape: Vec<usize> = entry
            .get("shape")
            .and_then(|s| s.as_array())
            .ok_or_else(|| st_err(path, format!("tensor `{name}` has no shape")))?
            .iter()
            .map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok()))
            .collect::<Option<_>>()
            .ok_or_else(|| st_err(path, format!("tensor `{name}` has a non-integer dimension")))?;
        let offs = entry
            .get("data_offsets")
            .and_then(|s| s.as_array())
            .filter(|a| a.len() == 2)
            .ok_or_else(|| st_err(path, format!("tensor `{name}` has no data_offsets pair")))?;
        let (b, e) = match (offs[0].as_u64(), offs[1].as_u64()) {
            (Some(b), Some(e)) if b <= e => (b as usize, e as usize),
            _ => return Err(st_err(path, format!("tensor `{name}` has invalid data_offsets"))),
        };
        let count = shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .and_then(|c| c.checked_mul(dtype.size()))
            .ok_or_else(|| st_err(path, format!("tensor `{name}` shape {shape:?} overflows")))?;
        if e - b != count {
            return Err(st_err(
                path,
                format!("tensor `{name}` ({dtype} {shape:?}) needs {count} bytes but data_offsets span {}", e - b),
            ));
        }
        if e > data_len {
            return Err(st_err(
                path,
                format!("tensor `{name}` ends at byte {e} of a {data_len}-byte data section (truncated file?)"),
            ));
        }
        ranges.push((b, e, name.as_str()));
        tensors.insert(
            name.clone(),
            TensorInfo { dtype, shape, start: data_start + b, end: data_start + e },
        );
    }
    ranges.sort_unstable();
    for w in ranges.windows(2) {
        if w[1].0 < w[0].1 {
            return Err(st_err(path, format!("tensors `{}` and `{}` overlap", w[0].2, w[1].2)));
        }
    }
    Ok((tensors, metadata))
}

impl SafeTensorsFile {
    /// Map a file and validate its header.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let file = std::fs::File::open(path)
            .map_err(|source| CoreError::Io { path: path.to_path_buf(), source })?;
        // SAFETY: the mapping is read-only; aria never writes through it. Another process
        // truncating the file while it is mapped would be undefined behaviour, as with every
        // mmap-based loader; model files are treated as immutable.
        let map = unsafe { Mmap::map(&file) }
            .map_err(|source| CoreError::Io { path: path.to_path_buf(), source })?;
        let (tensors, metadata) = parse_header(path, &map)?;
        Ok(SafeTensorsFile { path: path.to_path_buf(), map: Arc::new(map), tensors, metadata })
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

    /// The named tensor, borrowed from the map when aligned (copied otherwise).
    pub fn tensor(&self, name: &str) -> Result<Tensor> {
        let info = self.tensors.get(name).ok_or_else(|| CoreError::MissingTensor {
            name: name.to_string(),
            files: self.path.display().to_string(),
        })?;
        let aligned = (self.map.as_ptr() as usize + info.start) % info.dtype.size() == 0;
        if aligned {
            let storage = Storage::Mapped {
                map: self.map.clone(),
                start: info.start,
                len: info.end - info.start,
                dtype: info.dtype,
            };
            Tensor::from_storage(
                Arc::new(storage),
                info.dtype,
                info.shape.clone(),
                contiguous_strides(&info.shape),
                0,
            )
        } else {
            let bytes = &self.map[info.start..info.end];
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
}

impl WeightLoader {
    /// Open and index a set of files (shards of one checkpoint). A tensor name present in two
    /// shards is an error.
    pub fn open<P: AsRef<Path>>(paths: &[P]) -> Result<Self> {
        let mut files = Vec::new();
        let mut index = HashMap::new();
        for p in paths {
            let f = SafeTensorsFile::open(p)?;
            for name in f.tensors.keys() {
                if let Some(prev) = index.insert(name.clone(), files.len()) {
                    let prev: &SafeTensorsFile = &files[prev];
                    return Err(st_err(
                        &f.path,
                        format!("tensor `{name}` also present in {}", prev.path.display()),
                    ));
                }
            }
            files.push(f);
        }
        if files.is_empty() {
            return Err(CoreError::Invalid("WeightLoader::open: no files given".into()));
        }
        Ok(WeightLoader { files: Arc::new(Files { files, index }), prefix: String::new(), dtype: None })
    }

    /// Open a checkpoint given as a file, or as a `*.safetensors.index.json` shard index.
    pub fn open_checkpoint(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let is_index = path.to_string_lossy().ends_with(".index.json");
        if !is_index {
            return Self::open(&[path]);
        }
        let v = crate::config::read_json(path)?;
        let map = v.get("weight_map").and_then(|m| m.as_object()).ok_or_else(|| CoreError::Json {
            path: path.to_path_buf(),
            reason: "missing key `weight_map`".into(),
        })?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let mut shards: Vec<PathBuf> = Vec::new();
        for f in map.values() {
            let f = f.as_str().ok_or_else(|| CoreError::Json {
                path: path.to_path_buf(),
                reason: "`weight_map` values must be file names".into(),
            })?;
            let p = dir.join(f);
            if !shards.contains(&p) {
                shards.push(p);
            }
        }
        Self::open(&shards)
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
        WeightLoader { files: self.files.clone(), prefix, dtype: self.dtype }
    }

    /// A loader that converts every tensor it returns to `dtype` (`None`: keep the stored one).
    pub fn with_dtype(&self, dtype: Option<DType>) -> WeightLoader {
        WeightLoader { files: self.files.clone(), prefix: self.prefix.clone(), dtype }
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
        let p = if self.prefix.is_empty() { String::new() } else { format!("{}.", self.prefix) };
        let mut v: Vec<String> = self
            .files
            .index
            .keys()
            .filter_map(|k| k.strip_prefix(&p).map(str::to_string))
            .collect();
        v.sort();
        v
    }

    /// Metadata and tensor info for `name`.
    pub fn info(&self, name: &str) -> Result<(&Path, &TensorInfo)> {
        let full = self.full_name(name);
        let i = *self.files.index.get(&full).ok_or_else(|| self.missing(&full))?;
        let f = &self.files.files[i];
        Ok((&f.path, &f.tensors[&full]))
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

    /// The tensor `name` with any shape, in the loader's dtype policy.
    pub fn get_any(&self, name: &str) -> Result<Tensor> {
        let full = self.full_name(name);
        let i = *self.files.index.get(&full).ok_or_else(|| self.missing(&full))?;
        let t = self.files.files[i].tensor(&full)?;
        match self.dtype {
            Some(d) if d != t.dtype() => {
                if !t.dtype().is_float() || !d.is_float() {
                    return Err(CoreError::WeightDType {
                        name: full,
                        expected: d.to_string(),
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
        let (path, info) = self.info(name)?;
        if info.shape != shape {
            return Err(CoreError::WeightShape {
                name: full,
                file: path.display().to_string(),
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

    /// Metadata of the file that holds `name`.
    pub fn file_metadata(&self, name: &str) -> Result<&HashMap<String, String>> {
        let full = self.full_name(name);
        let i = *self.files.index.get(&full).ok_or_else(|| self.missing(&full))?;
        Ok(&self.files.files[i].metadata)
    }
}

/// Write tensors to a safetensors file (f32/f16/bf16/i8/u8/i64), with optional metadata.
pub fn save_safetensors(
    path: impl AsRef<Path>,
    tensors: &[(&str, &Tensor)],
    metadata: Option<&HashMap<String, String>>,
) -> Result<()> {
    let path = path.as_ref();
    let mut header = serde_json::Map::new();
    if let Some(m) = metadata {
        let mm: serde_json::Map<String, serde_json::Value> =
            m.iter().map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone()))).collect();
        header.insert("__metadata__".into(), serde_json::Value::Object(mm));
    }
    let mut datas = Vec::new();
    let mut off = 0usize;
    for (name, t) in tensors {
        let t = t.contiguous()?;
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
        .map_err(|e| st_err(path, e.to_string()))?;
    while (h.len() + 8) % 8 != 0 {
        h.push(b' ');
    }
    let mut out = Vec::with_capacity(8 + h.len() + off);
    out.extend_from_slice(&(h.len() as u64).to_le_bytes());
    out.extend_from_slice(&h);
    for d in datas {
        out.extend_from_slice(&d);
    }
    std::fs::write(path, out).map_err(|source| CoreError::Io { path: path.to_path_buf(), source })
}
