//! The two encodings of a graph in an archive: graph.fb and graph.pdmodel.

/// The two ways a graph is stored in an archive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GraphFormat {
    /// `graph.fb`: modelzip's FlatBuffers schema (schemas/graph.fbs).
    FlatBuffers,
    /// `graph.pdmodel`: a Paddle ProgramDesc protobuf.
    ProgramDesc,
}

impl GraphFormat {
    /// The entry file name inside a tag (`graph.fb` or `graph.pdmodel`).
    pub fn file_name(self) -> &'static str {
        match self {
            GraphFormat::FlatBuffers => "graph.fb",
            GraphFormat::ProgramDesc => "graph.pdmodel",
        }
    }

    /// Guesses the format of graph bytes: FlatBuffers when bytes 4..8 are graph.fb's
    /// identifier `MZGF`, otherwise ProgramDesc when the bytes start with the tag of
    /// `ProgramDesc.blocks` (field 1, length-delimited); `None` for anything else.
    pub fn sniff(bytes: &[u8]) -> Option<GraphFormat> {
        if bytes.get(4..8) == Some(super::flatbuffers::IDENTIFIER.as_bytes()) {
            Some(GraphFormat::FlatBuffers)
        } else if bytes.first() == Some(&0x0a) {
            Some(GraphFormat::ProgramDesc)
        } else {
            None
        }
    }

    internal! {
        /// The format of an entry file name, if it is one of the two.
        pub fn from_file_name(name: &str) -> Option<GraphFormat> {
            match name {
                "graph.fb" => Some(GraphFormat::FlatBuffers),
                "graph.pdmodel" => Some(GraphFormat::ProgramDesc),
                _ => None,
            }
        }
    }
}
