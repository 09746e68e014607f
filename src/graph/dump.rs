//! Human-readable renderings of a graph: a text listing, JSON, and protobuf text format.
