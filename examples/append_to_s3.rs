//! Adds a tag to an archive in an S3 bucket (or to a local file) with [`Appender`]: of an
//! `s3://` URL only the new tag's bytes are uploaded, the old ones copied by the store,
//! and the new version is committed only if the object is still the version opened
//! (docs/REMOTE.md, "Remote appends"). Credentials and endpoint come from the `AWS_*`
//! environment (`AWS_ENDPOINT_URL` for an S3-compatible server).
//!
//! `cargo run --example append_to_s3 -- s3://bucket/run.zip step-7`
//!
//! Prints the archive's tags afterwards, one line.

use modelzip::{AppendMode, Appender, Archive, Tensor};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [archive, tag] = args.as_slice() else {
        return Err("usage: append_to_s3 ARCHIVE TAG".into());
    };
    let w = Tensor::from_slice(vec![2, 2], &[1.0f32, 2.0, 3.0, 4.0])?;
    // The same call appends to a local file (journaled, in place) or to an s3:// object.
    let mut app = Appender::open(archive, AppendMode::InPlace)?;
    let mut t = app.begin_tag(tag)?;
    t.param("w", &w.view())?;
    t.metadata(br#"{"by": "examples/append_to_s3.rs"}"#)?;
    t.finish()?;
    app.finish()?;
    let a = if modelzip::remote::is_url(archive) {
        Archive::open_url(archive)?
    } else {
        Archive::open(archive)?
    };
    println!("{}", a.tags().join(" "));
    Ok(())
}
