//! `Tensor`: layouts and views, strided copies, cat/stack, dtype conversion (f16/bf16 rounding),
//! zero-size dimensions and error cases. Reference results come from a naive index-by-index
//! evaluation written independently of the implementation.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use aria_core::storage::{CpuData, Storage};
use aria_core::{bf16, contiguous_strides, f16, CoreError, DType, Tensor};

fn iota(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_vec((0..n).map(|i| i as f32).collect(), shape).unwrap()
}

/// Element at multi-index `idx` of a row-major array of shape `shape`.
fn at(data: &[f32], shape: &[usize], idx: &[usize]) -> f32 {
    let strides = contiguous_strides(shape);
    data[idx.iter().zip(&strides).map(|(i, s)| i * s).sum::<usize>()]
}

/// Every multi-index of `shape` in row-major order.
fn indices(shape: &[usize]) -> Vec<Vec<usize>> {
    let n: usize = shape.iter().product();
    let mut out = Vec::with_capacity(n);
    for mut flat in 0..n {
        let mut idx = vec![0; shape.len()];
        for d in (0..shape.len()).rev() {
            idx[d] = flat % shape[d];
            flat /= shape[d];
        }
        out.push(idx);
    }
    out
}

fn is_shape_err(e: &CoreError) -> bool {
    matches!(e, CoreError::Shape { .. })
}

#[test]
fn constructors_and_layout() {
    let t = iota(&[2, 3, 4]);
    assert_eq!(t.shape(), &[2, 3, 4]);
    assert_eq!(t.dims(), t.shape());
    assert_eq!(t.strides(), &[12, 4, 1]);
    assert_eq!((t.rank(), t.elem_count(), t.offset()), (3, 24, 0));
    assert_eq!(t.dim(1).unwrap(), 3);
    assert!(is_shape_err(&t.dim(3).unwrap_err()));
    assert!(t.is_contiguous() && t.device().is_cpu() && !t.is_mapped());
    assert_eq!(contiguous_strides(&[]), Vec::<usize>::new());
    assert_eq!(contiguous_strides(&[5, 0, 2]), vec![0, 2, 1]);
    let e = Tensor::from_vec(vec![1f32; 5], &[2, 3]).unwrap_err();
    assert!(
        is_shape_err(&e) && e.to_string().contains("from_vec"),
        "{e}"
    );
    let s = Tensor::from_vec(vec![7f32], &[]).unwrap();
    assert_eq!((s.rank(), s.elem_count()), (0, 1));
    assert_eq!(s.to_scalar_f32().unwrap(), 7.0);
    assert!(t.to_scalar_f32().is_err());
    for dt in [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::I8,
        DType::U8,
        DType::I64,
    ] {
        let z = Tensor::zeros(&[2, 3], dt);
        assert_eq!(z.dtype(), dt);
        assert_eq!(z.to_vec_f32().unwrap(), vec![0.0; 6]);
        assert_eq!(z.as_bytes().unwrap().len(), 6 * dt.size());
    }
    assert_eq!(
        Tensor::full(&[2], 1.5).to_vec::<f32>().unwrap(),
        vec![1.5, 1.5]
    );
    let c = Tensor::from_slice(&[1i64, 2, 3], &[3]).unwrap();
    assert_eq!(c.to_vec::<i64>().unwrap(), vec![1, 2, 3]);
    // Typed access checks the dtype.
    let e = t.as_slice::<f16>().unwrap_err();
    assert!(
        matches!(
            e,
            CoreError::DType {
                op: "as_slice",
                dtype: DType::F32,
                ..
            }
        ),
        "{e}"
    );
    assert!(matches!(
        t.to_vec::<i64>().unwrap_err(),
        CoreError::DType { .. }
    ));
    assert!(format!("{t:?}").contains("[2, 3, 4]"));
}

#[test]
fn narrow_transpose_permute_against_naive() {
    let shape = [3, 4, 5];
    let t = iota(&shape);
    let data = t.to_vec::<f32>().unwrap();
    for dim in 0..3 {
        for start in 0..shape[dim] {
            for len in 0..=shape[dim] - start {
                let v = t.narrow(dim, start, len).unwrap();
                let mut vs = shape.to_vec();
                vs[dim] = len;
                assert_eq!(v.shape(), vs.as_slice());
                let got = v.to_vec::<f32>().unwrap();
                let want: Vec<f32> = indices(&vs)
                    .into_iter()
                    .map(|mut i| {
                        i[dim] += start;
                        at(&data, &shape, &i)
                    })
                    .collect();
                assert_eq!(got, want, "narrow({dim}, {start}, {len})");
                assert_eq!(v.contiguous().unwrap().to_vec::<f32>().unwrap(), want);
                assert_eq!(v.to_vec_f32().unwrap(), want);
            }
        }
    }
    for perm in [
        [0, 1, 2],
        [0, 2, 1],
        [1, 0, 2],
        [1, 2, 0],
        [2, 0, 1],
        [2, 1, 0],
    ] {
        let p = t.permute(&perm).unwrap();
        let ps: Vec<usize> = perm.iter().map(|&d| shape[d]).collect();
        assert_eq!(p.shape(), ps.as_slice());
        assert_eq!(p.is_contiguous(), perm == [0, 1, 2]);
        let want: Vec<f32> = indices(&ps)
            .into_iter()
            .map(|i| {
                let mut src = [0; 3];
                for (k, &d) in perm.iter().enumerate() {
                    src[d] = i[k];
                }
                at(&data, &shape, &src)
            })
            .collect();
        assert_eq!(p.to_vec::<f32>().unwrap(), want, "permute {perm:?}");
        let c = p.contiguous().unwrap();
        assert!(c.is_contiguous());
        assert_eq!(c.to_vec::<f32>().unwrap(), want);
        // Views of views: narrow after permute.
        let pn = p.narrow(2, 1, ps[2] - 1).unwrap();
        let want2: Vec<f32> = indices(pn.shape())
            .into_iter()
            .map(|mut i| {
                i[2] += 1;
                at(&want, &ps, &i)
            })
            .collect();
        assert_eq!(pn.to_vec::<f32>().unwrap(), want2);
    }
    let tt = t.transpose(0, 2).unwrap();
    assert_eq!(
        tt.to_vec::<f32>().unwrap(),
        t.permute(&[2, 1, 0]).unwrap().to_vec::<f32>().unwrap()
    );
    assert_eq!(t.transpose(1, 1).unwrap().to_vec::<f32>().unwrap(), data);
    // Views share storage; copies do not.
    assert!(Arc::ptr_eq(t.storage(), tt.storage()));
    assert!(Arc::ptr_eq(
        t.storage(),
        t.narrow(1, 1, 2).unwrap().storage()
    ));
    assert!(!Arc::ptr_eq(
        t.storage(),
        tt.contiguous().unwrap().storage()
    ));
    // Errors.
    assert!(is_shape_err(&t.narrow(1, 3, 2).unwrap_err()));
    assert!(is_shape_err(&t.narrow(3, 0, 1).unwrap_err()));
    assert!(is_shape_err(&t.narrow(0, usize::MAX, 2).unwrap_err()));
    assert!(is_shape_err(&t.transpose(0, 3).unwrap_err()));
    for bad in [&[0, 1][..], &[0, 0, 1], &[0, 1, 3], &[0, 1, 2, 3]] {
        assert!(is_shape_err(&t.permute(bad).unwrap_err()), "{bad:?}");
    }
}

#[test]
fn reshape_squeeze_unsqueeze_get() {
    let t = iota(&[2, 3, 4]);
    let data = t.to_vec::<f32>().unwrap();
    let r = t.reshape(&[4, 6]).unwrap();
    assert_eq!(r.strides(), &[6, 1]);
    assert!(
        Arc::ptr_eq(r.storage(), t.storage()),
        "reshape of contiguous data is a view"
    );
    assert_eq!(r.to_vec::<f32>().unwrap(), data);
    assert!(is_shape_err(&t.reshape(&[5, 5]).unwrap_err()));
    // Reshape of a strided view copies in logical order; of a narrowed contiguous one, keeps
    // the offset.
    let tr = t.transpose(1, 2).unwrap();
    assert_eq!(
        tr.reshape(&[24]).unwrap().to_vec::<f32>().unwrap(),
        tr.to_vec::<f32>().unwrap()
    );
    let row = t.narrow(0, 1, 1).unwrap().reshape(&[12]).unwrap();
    assert_eq!(row.offset(), 12);
    assert_eq!(row.to_vec::<f32>().unwrap(), data[12..].to_vec());
    // unsqueeze/squeeze at every position.
    for d in 0..=3 {
        let u = t.unsqueeze(d).unwrap();
        let mut s = vec![2, 3, 4];
        s.insert(d, 1);
        assert_eq!(u.shape(), s.as_slice());
        assert!(u.is_contiguous());
        assert_eq!(u.to_vec::<f32>().unwrap(), data);
        assert_eq!(u.squeeze(d).unwrap().shape(), &[2, 3, 4]);
    }
    assert!(is_shape_err(&t.unsqueeze(4).unwrap_err()));
    assert!(is_shape_err(&t.squeeze(0).unwrap_err()));
    assert!(is_shape_err(&t.squeeze(5).unwrap_err()));
    // unsqueeze of a transposed view stays a correct view.
    let ut = tr.unsqueeze(1).unwrap();
    assert_eq!(ut.to_vec::<f32>().unwrap(), tr.to_vec::<f32>().unwrap());
    let g = t.get(1).unwrap();
    assert_eq!(g.shape(), &[3, 4]);
    assert_eq!(g.to_vec::<f32>().unwrap(), data[12..].to_vec());
    assert_eq!(
        t.get(1).unwrap().get(2).unwrap().to_vec::<f32>().unwrap(),
        data[20..24].to_vec()
    );
    assert!(is_shape_err(&t.get(2).unwrap_err()));
}

#[test]
fn cat_and_stack() {
    let a = iota(&[2, 3, 4]);
    let b = Tensor::from_vec((100..124).map(|i| i as f32).collect(), &[2, 3, 4]).unwrap();
    for dim in 0..3 {
        let c = Tensor::cat(&[&a, &b], dim).unwrap();
        let mut s = vec![2, 3, 4];
        s[dim] *= 2;
        assert_eq!(c.shape(), s.as_slice());
        let (ad, bd) = (a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
        let want: Vec<f32> = indices(&s)
            .into_iter()
            .map(|mut i| {
                if i[dim] < a.shape()[dim] {
                    at(&ad, a.shape(), &i)
                } else {
                    i[dim] -= a.shape()[dim];
                    at(&bd, b.shape(), &i)
                }
            })
            .collect();
        assert_eq!(c.to_vec::<f32>().unwrap(), want, "cat dim {dim}");
        // Narrowing the result gives back the parts.
        assert_eq!(
            c.narrow(dim, 0, a.shape()[dim])
                .unwrap()
                .to_vec::<f32>()
                .unwrap(),
            ad
        );
        assert_eq!(
            c.narrow(dim, a.shape()[dim], b.shape()[dim])
                .unwrap()
                .to_vec::<f32>()
                .unwrap(),
            bd
        );
    }
    // Strided inputs, unequal sizes, three parts, zero-size parts.
    let at_ = a.transpose(1, 2).unwrap(); // [2, 4, 3]
    let small = iota(&[2, 1, 3]);
    let empty = Tensor::zeros(&[2, 0, 3], DType::F32);
    let c = Tensor::cat(&[&at_, &empty, &small], 1).unwrap();
    assert_eq!(c.shape(), &[2, 5, 3]);
    assert_eq!(
        c.narrow(1, 0, 4).unwrap().to_vec::<f32>().unwrap(),
        at_.to_vec::<f32>().unwrap()
    );
    assert_eq!(
        c.narrow(1, 4, 1).unwrap().to_vec::<f32>().unwrap(),
        small.to_vec::<f32>().unwrap()
    );
    // Other dtypes keep their bits.
    let h1 = Tensor::from_vec(vec![f16::from_f32(0.1), f16::NAN], &[2]).unwrap();
    let h2 = Tensor::from_vec(vec![f16::from_f32(-0.0)], &[1]).unwrap();
    let h = Tensor::cat(&[&h1, &h2], 0).unwrap();
    let bits: Vec<u16> = h
        .to_vec::<f16>()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect();
    assert_eq!(
        bits,
        vec![f16::from_f32(0.1).to_bits(), f16::NAN.to_bits(), 0x8000]
    );
    let i = Tensor::cat(&[&Tensor::from_vec(vec![i64::MAX], &[1]).unwrap(); 2], 0).unwrap();
    assert_eq!(i.to_vec::<i64>().unwrap(), vec![i64::MAX; 2]);
    // Stack along every position.
    for dim in 0..=3 {
        let s = Tensor::stack(&[&a, &b, &a], dim).unwrap();
        let mut sh = vec![2, 3, 4];
        sh.insert(dim, 3);
        assert_eq!(s.shape(), sh.as_slice());
        for (k, part) in [&a, &b, &a].iter().enumerate() {
            let got = s.narrow(dim, k, 1).unwrap().squeeze(dim).unwrap();
            assert_eq!(got.to_vec::<f32>().unwrap(), part.to_vec::<f32>().unwrap());
        }
    }
    // Errors.
    assert!(matches!(
        Tensor::cat(&[], 0).unwrap_err(),
        CoreError::Invalid(_)
    ));
    assert!(is_shape_err(
        &Tensor::cat(&[&a, &iota(&[2, 3, 5])], 0).unwrap_err()
    ));
    assert!(is_shape_err(
        &Tensor::cat(&[&a, &iota(&[2, 3])], 0).unwrap_err()
    ));
    assert!(is_shape_err(&Tensor::cat(&[&a, &b], 3).unwrap_err()));
    assert!(is_shape_err(
        &Tensor::cat(&[&a, &a.to_dtype(DType::BF16).unwrap()], 0).unwrap_err()
    ));
    assert!(Tensor::stack(&[&a, &small], 0).is_err());
    assert!(Tensor::stack(&[&a], 4).is_err());
    assert!(Tensor::stack(&[], 0).is_err());
}

#[test]
fn dtype_round_trips_and_rounding() {
    // f16: 1 + 2^-11 is halfway between 1 and 1 + 2^-10 → rounds to even (1); 1 + 3·2^-11
    // rounds up to 1 + 2^-9. bf16 likewise at 2^-8 granularity.
    let v = vec![
        1.0 + 2f32.powi(-11),
        1.0 + 3.0 * 2f32.powi(-11),
        1.0 + 2f32.powi(-8),
        1.0 + 3.0 * 2f32.powi(-8),
        65504.0,
        65520.0,
        1e-8,
        -0.0,
        f32::INFINITY,
        f32::NAN,
    ];
    let t = Tensor::from_vec(v.clone(), &[10]).unwrap();
    let h = t.to_dtype(DType::F16).unwrap().to_vec_f32().unwrap();
    assert_eq!(h[0], 1.0);
    assert_eq!(h[1], 1.0 + 2f32.powi(-9));
    assert_eq!(h[4], 65504.0);
    assert_eq!(h[5], f32::INFINITY, "65520 overflows f16");
    assert_eq!(h[6], 0.0, "1e-8 underflows f16");
    assert!(h[7] == 0.0 && h[7].is_sign_negative());
    assert!(h[8].is_infinite() && h[9].is_nan());
    let b = t.to_dtype(DType::BF16).unwrap().to_vec_f32().unwrap();
    assert_eq!(b[0], 1.0);
    assert_eq!(b[2], 1.0, "1 + 2^-8 ties to even in bf16");
    assert_eq!(b[3], 1.0 + 2f32.powi(-6));
    assert_eq!(b[5], 65536.0);
    assert!(b[6] > 0.0, "bf16 keeps f32's exponent range");
    assert!(b[8].is_infinite() && b[9].is_nan());
    // Every f16 and bf16 value survives f32 and back bit-exactly (NaNs stay NaN).
    // (A sparse sample under miri, which is ~1000× slower.)
    let all16: Vec<u16> = (0..=u16::MAX)
        .step_by(if cfg!(miri) { 257 } else { 1 })
        .collect();
    let n16 = all16.len();
    let hf: Vec<f16> = all16.iter().map(|&u| f16::from_bits(u)).collect();
    let ht = Tensor::from_vec(hf.clone(), &[n16]).unwrap();
    let back = ht
        .to_dtype(DType::F32)
        .unwrap()
        .to_dtype(DType::F16)
        .unwrap();
    for (a, b) in hf.iter().zip(back.as_slice::<f16>().unwrap()) {
        assert!(
            a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
            "{a:?} -> {b:?}"
        );
    }
    let bf: Vec<bf16> = all16.iter().map(|&u| bf16::from_bits(u)).collect();
    let bt = Tensor::from_vec(bf.clone(), &[n16]).unwrap();
    let back = bt
        .to_dtype(DType::F32)
        .unwrap()
        .to_dtype(DType::BF16)
        .unwrap();
    for (a, b) in bf.iter().zip(back.as_slice::<bf16>().unwrap()) {
        assert!(
            a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
            "{a:?} -> {b:?}"
        );
    }
    // f16 → bf16 → f32 goes through f32 (no double rounding surprises for exact values).
    let x = Tensor::from_vec(vec![f16::from_f32(0.5), f16::from_f32(-3.0)], &[2]).unwrap();
    assert_eq!(
        x.to_dtype(DType::BF16).unwrap().to_vec_f32().unwrap(),
        vec![0.5, -3.0]
    );
    // Integers truncate toward zero, saturate, NaN → 0.
    let f = Tensor::from_vec(vec![2.7f32, -2.7, 300.0, -300.0, f32::NAN, 1e20], &[6]).unwrap();
    assert_eq!(
        f.to_dtype(DType::I8).unwrap().to_vec::<i8>().unwrap(),
        vec![2, -2, 127, -128, 0, 127]
    );
    assert_eq!(
        f.to_dtype(DType::U8).unwrap().to_vec::<u8>().unwrap(),
        vec![2, 0, 255, 0, 0, 255]
    );
    assert_eq!(
        f.to_dtype(DType::I64).unwrap().to_vec::<i64>().unwrap(),
        vec![2, -2, 300, -300, 0, i64::MAX]
    );
    let ids = Tensor::from_vec(vec![-5i64, 0, 1 << 24], &[3]).unwrap();
    assert_eq!(ids.to_vec_f32().unwrap(), vec![-5.0, 0.0, 16_777_216.0]);
    let u = Tensor::from_vec(vec![0u8, 255], &[2]).unwrap();
    assert_eq!(u.to_vec_f32().unwrap(), vec![0.0, 255.0]);
    // Same dtype: a cheap clone when contiguous, a compact copy when strided.
    let s = iota(&[3, 2]);
    assert!(Arc::ptr_eq(
        s.to_dtype(DType::F32).unwrap().storage(),
        s.storage()
    ));
    let st = s.transpose(0, 1).unwrap().to_dtype(DType::F32).unwrap();
    assert!(st.is_contiguous());
    assert_eq!(st.to_vec::<f32>().unwrap(), vec![0., 2., 4., 1., 3., 5.]);
    // Strided conversions of every dtype agree with converting the compact copy.
    for dt in [DType::F16, DType::BF16, DType::I8, DType::U8, DType::I64] {
        let base = iota(&[4, 5]).to_dtype(dt).unwrap();
        let view = base.transpose(0, 1).unwrap().narrow(0, 1, 3).unwrap();
        let want = view.contiguous().unwrap().to_vec_f32().unwrap();
        assert_eq!(view.to_vec_f32().unwrap(), want, "{dt}");
        assert_eq!(
            view.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap(),
            want,
            "{dt}"
        );
    }
}

#[test]
fn zero_size_dimensions() {
    let z = Tensor::zeros(&[3, 0, 2], DType::F32);
    assert_eq!(z.elem_count(), 0);
    assert!(z.is_contiguous());
    assert!(z.as_slice::<f32>().unwrap().is_empty());
    assert!(z.as_bytes().unwrap().is_empty());
    assert!(z.to_vec::<f32>().unwrap().is_empty());
    assert_eq!(z.reshape(&[0, 7]).unwrap().shape(), &[0, 7]);
    assert!(z.reshape(&[1]).is_err());
    let zt = z.permute(&[2, 1, 0]).unwrap();
    assert!(zt.is_contiguous());
    assert!(zt.contiguous().unwrap().to_vec::<f32>().unwrap().is_empty());
    assert!(zt
        .to_dtype(DType::BF16)
        .unwrap()
        .to_vec_f32()
        .unwrap()
        .is_empty());
    // Narrowing to nothing, at either end.
    let t = iota(&[2, 3]);
    for start in [0, 3] {
        let n = t.narrow(1, start, 0).unwrap();
        assert_eq!(n.shape(), &[2, 0]);
        assert!(n.to_vec::<f32>().unwrap().is_empty());
        assert!(n.as_slice::<f32>().unwrap().is_empty());
    }
    let c = Tensor::cat(&[&t.narrow(1, 0, 0).unwrap(), &t], 1).unwrap();
    assert_eq!(c.to_vec::<f32>().unwrap(), t.to_vec::<f32>().unwrap());
    let s = Tensor::stack(&[&z, &z], 1).unwrap();
    assert_eq!(s.shape(), &[3, 2, 0, 2]);
    assert!(Tensor::from_vec(Vec::<f32>::new(), &[0])
        .unwrap()
        .to_vec::<f32>()
        .unwrap()
        .is_empty());
    assert!(Tensor::from_vec(vec![1f32], &[1, 0]).is_err());
}

#[test]
fn from_storage_validates_layouts() {
    let storage = || {
        Arc::new(Storage::Cpu(CpuData::from_vec(
            (0..12).map(|i| i as f32).collect(),
        )))
    };
    // A hand-made strided view: every other element of a 3×4 buffer, starting at 1.
    let t = Tensor::from_storage(storage(), DType::F32, vec![3, 2], vec![4, 2], 1).unwrap();
    assert_eq!(t.to_vec::<f32>().unwrap(), vec![1., 3., 5., 7., 9., 11.]);
    assert!(!t.is_contiguous());
    assert!(t.as_slice::<f32>().is_err());
    assert!(t.as_bytes().is_err());
    // Broadcast (stride 0) views read repeatedly.
    let b = Tensor::from_storage(storage(), DType::F32, vec![3, 2], vec![0, 1], 4).unwrap();
    assert_eq!(b.to_vec::<f32>().unwrap(), vec![4., 5., 4., 5., 4., 5.]);
    // Out of range, overflowing, mismatched rank or dtype: typed errors, no panic.
    for (shape, strides, off) in [
        (vec![3, 4], vec![4, 1], 1),
        (vec![13], vec![1], 0),
        (vec![2], vec![usize::MAX], 0),
        (vec![usize::MAX, 2], vec![1, 1], 0),
        (vec![1], vec![1], usize::MAX),
        (vec![2, 2], vec![1], 0),
    ] {
        let e =
            Tensor::from_storage(storage(), DType::F32, shape.clone(), strides, off).unwrap_err();
        assert!(is_shape_err(&e), "{shape:?}: {e}");
    }
    let e = Tensor::from_storage(storage(), DType::F16, vec![2], vec![1], 0).unwrap_err();
    assert!(
        matches!(
            e,
            CoreError::DType {
                dtype: DType::F16,
                ..
            }
        ),
        "{e}"
    );
    // A zero-element layout never reads, whatever its offset.
    let z = Tensor::from_storage(storage(), DType::F32, vec![0, 5], vec![5, 1], 12).unwrap();
    assert!(z.to_vec::<f32>().unwrap().is_empty());
    // CpuData reports its dtype.
    assert_eq!(CpuData::from_vec(vec![1u8]).dtype(), DType::U8);
    assert_eq!(CpuData::from_vec(vec![bf16::ONE]).dtype(), DType::BF16);
    assert_eq!(CpuData::from_vec(vec![1i8]).dtype(), DType::I8);
}
