fn main() {
    let p = std::env::args().nth(1).unwrap();
    for _ in 0..5 {
        let t = std::time::Instant::now();
        let a = modelzip::Archive::open(&p).unwrap();
        let t1 = t.elapsed();
        let s = a.tag_summaries().unwrap();
        let t2 = t.elapsed();
        drop(a);
        let t3 = t.elapsed();
        eprintln!(
            "open {:?} summaries {:?} drop {:?} n={}",
            t1,
            t2 - t1,
            t3 - t2,
            s.len()
        );
    }
}
