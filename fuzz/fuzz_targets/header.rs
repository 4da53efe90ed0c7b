//! Arbitrary bytes as a safetensors file: the header parser must never panic, must agree with
//! the reference `safetensors` parser (same verdict, same tensor table), and every tensor of an
//! accepted file must load through `SafeTensorsFile` / `WeightLoader`, convert to f32 and match
//! the bytes the header points at.
#![no_main]

use std::path::Path;

use aria_core::loader::parse_header;
use aria_core::{CoreError, DType, SafeTensorsFile, WeightLoader};
use libfuzzer_sys::fuzz_target;

const SUPPORTED: [&str; 7] = ["F32", "F16", "BF16", "I8", "U8", "BOOL", "I64"];

fuzz_target!(|data: &[u8]| {
    let path = Path::new("fuzz.safetensors");
    let ours = parse_header(path, data);
    let theirs = safetensors::SafeTensors::deserialize(data);
    let (table, _) = match (ours, theirs) {
        (Ok(t), Ok(st)) => {
            let views = st.tensors();
            assert_eq!(views.len(), t.0.len(), "tensor tables differ in size");
            for (name, view) in &views {
                let info = &t.0[name];
                assert_eq!(info.shape, view.shape(), "{name}");
                assert_eq!(
                    data[info.start..info.end].as_ptr(),
                    view.data().as_ptr(),
                    "{name}"
                );
                assert_eq!(info.end - info.start, view.data().len(), "{name}");
            }
            t
        }
        (Err(e), Ok(st)) => {
            assert!(
                matches!(e, CoreError::UnsupportedDType { .. }),
                "rejected a file the reference accepts: {e}"
            );
            let unsupported = st
                .tensors()
                .iter()
                .any(|(_, v)| !SUPPORTED.contains(&format!("{:?}", v.dtype()).as_str()));
            assert!(unsupported, "UnsupportedDType on supported dtypes: {e}");
            return;
        }
        (Ok(_), Err(e)) => panic!("accepted a file the reference rejects: {e}"),
        (Err(e), Err(_)) => {
            assert!(
                e.to_string().contains("fuzz.safetensors"),
                "unnamed error: {e}"
            );
            return;
        }
    };
    let file = SafeTensorsFile::from_bytes(path, data).expect("accepted bytes load");
    let loader = WeightLoader::from_files(vec![file]).expect("one file indexes");
    for name in loader.names() {
        let info = &table[&name];
        let t = loader.get(&name, &info.shape).expect("listed tensor loads");
        assert_eq!(
            t.as_bytes().expect("contiguous"),
            &data[info.start..info.end]
        );
        let v = t.to_vec_f32().expect("converts to f32");
        assert_eq!(v.len(), t.elem_count());
        if t.dtype().is_float() {
            let f = loader
                .get_as(&name, &info.shape, DType::F32)
                .expect("float converts");
            assert_eq!(f.elem_count(), t.elem_count());
        }
    }
});
