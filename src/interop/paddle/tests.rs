use super::import::var_file;
use super::vars::{Declared, check_declared};
use super::*;
use crate::graph::Var;
use crate::graph::VarKind;
use crate::tensor::DType;
use crate::tensor::TensorView;

fn graph(vars: Vec<Var>) -> Graph {
    let mut p = crate::graph::Program::default();
    p.blocks[0].vars = vars;
    Graph::from(p)
}

fn holder(name: &str, ty: i32) -> Var {
    Var {
        kind: VarKind::Other(ty),
        dtype: None,
        persistable: Some(true),
        ..Var::new(name, VarKind::Other(ty), DType::Fp32, vec![])
    }
}

#[test]
fn persistables_are_sorted_by_bytes_and_skip_feed_fetch_and_temporaries() {
    let g = graph(vec![
        Var::new("a_2", VarKind::Constant, DType::Fp32, vec![1]),
        holder("feed", 9),
        Var::new("tmp", VarKind::Variable, DType::Fp32, vec![-1]),
        Var::new("a_10", VarKind::Parameter, DType::Fp32, vec![1]),
        holder("fetch", 10),
        Var::new("Beta", VarKind::Constant, DType::Int64, vec![]),
        holder("raw", 17),
    ]);
    let names: Vec<&str> = persistable_vars(&g)
        .unwrap()
        .iter()
        .map(|v| v.name.as_str())
        .collect();
    assert_eq!(names, ["Beta", "a_10", "a_2"]);
}

#[test]
fn unsupported_persistable_types_and_duplicates_are_errors() {
    let e = persistable_vars(&graph(vec![holder("rows", 8)])).unwrap_err();
    assert!(
        e.to_string().contains("\"rows\" has type SELECTED_ROWS"),
        "{e}"
    );
    let c = Var::new("w", VarKind::Constant, DType::Fp32, vec![2]);
    let e = persistable_vars(&graph(vec![c.clone(), c])).unwrap_err();
    assert!(e.to_string().contains("\"w\" twice"), "{e}");
}

#[test]
fn declared_dims_minus_one_match_any_extent() {
    let v = Declared::from(&Var::new("w", VarKind::Constant, DType::Fp32, vec![-1, 4]));
    let data = [0u8; 32];
    let ok = TensorView::new(DType::Fp32, vec![2, 4], Vec::new(), &data).unwrap();
    assert!(check_declared(&v, &ok, "t").is_ok());
    let bad = TensorView::new(DType::Fp32, vec![4, 2], Vec::new(), &data).unwrap();
    assert!(check_declared(&v, &bad, "t").is_err());
    let rank = TensorView::new(DType::Fp32, vec![8], Vec::new(), &data).unwrap();
    assert!(check_declared(&v, &rank, "t").is_err());
}

#[test]
fn variable_names_cannot_leave_the_directory() {
    let d = Path::new("dir");
    assert_eq!(var_file(d, "a/b").unwrap(), Path::new("dir/a/b"));
    for bad in ["", "../x", "/etc/passwd", "a/../../b", ".", "a\0b"] {
        assert!(var_file(d, bad).is_err(), "{bad:?}");
    }
}
