"""docs/FORMAT.md is enough to read what modelzip writes.

Every writer path (pack new / in place / rewrite, rm and prune both ways, compact, quantize
per tensor and per channel, cast FP16 / BF16, import from safetensors, ONNX, TensorFlow and
Paddle, convert, `modelzip.save`, `Checkpointer`, shared graphs, updater state) makes an
archive that spec_reader.py, written from FORMAT.md alone, reads exactly as the `modelzip`
package does: tags, default tag, parameter names, dtypes, dims, LoD, bytes, updater state,
graph and metadata. Its sha256sums.txt check passes, _summary.txt is current and says what
the tables say, every tensor is stored with its data 64-byte aligned, and every ref resolves
to the entry `modelzip show` names.
"""

from __future__ import annotations

import hashlib
import shutil
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest

import modelzip
from conftest import PADDLE_FIXTURES, REPO, cli_json, run_cli
from spec_reader import SpecArchive, SpecError
from spec_writer import SpecWriter, lodtensor, training_config

FIXTURES = REPO / "tests" / "fixtures"
MLP_MODEL = PADDLE_FIXTURES / "mlp.pdmodel"
MLP_PARAMS = PADDLE_FIXTURES / "mlp.pdiparams"


def spec_view(path: Path, ours: bool = True) -> dict:
    """What the spec reader reads, checking sha256sums.txt and, when modelzip wrote the
    archive (`ours`), that _summary.txt is current and every tensor stored and aligned."""
    with SpecArchive(path) as ar:
        view: dict = {"tags": ar.tags, "default": ar.default_tag, "tag": {}}
        current = ar.summary()
        assert current is not None or not ours, f"{path}: no current _summary.txt"
        for record in current.records if current else []:
            assert record == ar.describe(record["tag"]), f"{path}: _summary.txt record"
        for name in ar.tags:
            t = ar.tag(name.swapcase())  # tags are looked up ignoring ASCII case
            assert t.name == name
            assert t.check_sha256sums(), f"{name}: no sha256sums.txt"  # modelzip writes one
            params = []
            for p in t.param_names():
                x = t.param(p)
                entry = t.param_ref(p).entry
                if ours:
                    assert ar.entries[entry].compress_type == 0, f"{entry} is not stored"
                    assert ar.data_offset(entry, x) % 64 == 0, f"{entry}: data not aligned"
                    assert ar.alignment_field(entry) == 64, entry
                params.append((p, x.numpy_dtype_name, x.dims, x.lod, x.data))
            updater = {
                u: [(x.numpy_dtype_name, x.dims, x.data) for x in t.updater(u)]
                for u in t.updater_names()
            }
            for u in t.updater_names():
                for ref, x in zip(t.updater_refs(u), t.updater(u)):
                    assert not ours or ar.data_offset(ref.entry, x) % 64 == 0, ref.entry
            graph = t.graph()
            view["tag"][name] = {
                "params": params,
                "updater": updater,
                "graph": graph,
                "metadata": t.metadata(),
                "entries": [t.param_ref(p).entry for p in t.param_names()],
                "updater_entries": {
                    u: [r.entry for r in t.updater_refs(u)] for u in t.updater_names()
                },
            }
    return view


def modelzip_view(path: Path) -> dict:
    """The same, as the modelzip package and `modelzip show` report it."""
    with modelzip.open(path) as ar:
        view: dict = {"tags": ar.tags, "default": ar.default_tag, "tag": {}}
        for name in ar.tags:
            t = ar[name]
            params = []
            for p in t.keys():
                a = t[p]
                params.append((p, a.dtype.name, tuple(a.shape), t.lod(p), a.tobytes()))
            updater = {
                u: [(a.dtype.name, tuple(a.shape), a.tobytes()) for a in t.updater(u)]
                for u in t.updater_keys()
            }
            graph = (t.graph_encoding, t.graph_bytes()) if t.graph_encoding else None
            show = cli_json("show", path, "--tag", name)
            view["tag"][name] = {
                "params": params,
                "updater": updater,
                "graph": graph,
                "metadata": t.metadata,
                "entries": [p["entry"] for p in show["params"]],
                "updater_entries": {
                    u["name"]: [a["entry"] for a in u["arrays"]] for u in show["updater"]
                },
            }
    return view


def check(path: Path, ours: bool = True) -> dict:
    """The spec reader and modelzip agree on `path`, and `modelzip verify` passes."""
    spec = spec_view(path, ours)
    mz = modelzip_view(path)
    assert spec["tags"] == mz["tags"]
    assert spec["default"] == mz["default"]
    for name in spec["tags"]:
        s, m = spec["tag"][name], mz["tag"][name]
        for key in s:
            assert s[key] == m[key], f"{path} tag {name}: {key} differs"
    run_cli("verify", path, "-q")
    return spec


def tensors(spec: dict, tag: str) -> dict:
    return {p[0]: p for p in spec["tag"][tag]["params"]}


# ---- pack --------------------------------------------------------------------------


def make_updater(tmp: Path) -> Path:
    """Adam-like state, UPDATER/<param>/<array>, for two of the MLP's parameters."""
    up = tmp / "adam"
    for p in ("fc_0.w_0", "fc_1.b_0"):
        (up / p).mkdir(parents=True)
        shutil.copy(PADDLE_FIXTURES / "mlp_persistables" / p, up / p / "0_m")
        shutil.copy(PADDLE_FIXTURES / "mlp_persistables" / "fc_1.b_0", up / p / "1_v")
    return up


def test_pack_new_in_place_and_rewrite(tmp: Path):
    # Every dtype, 0-D, empty and LoD tensors, and names that need %XX or hold '/'.
    dense = tmp / "dense"
    shutil.copytree(PADDLE_FIXTURES / "save_dense_tensor", dense)
    (dense / "sub" / "dir").mkdir(parents=True)
    shutil.copy(dense / "lod2_int64.bin", dense / "sub" / "dir" / "my param%ü")
    ar = tmp / "a.zip"
    run_cli("pack", ar, dense, "--tag", "Dense", "-q")
    spec = check(ar)
    assert "sub/dir/my param%ü" in tensors(spec, "Dense")
    assert tensors(spec, "Dense")["lod2_int64.bin"][3] == [[0, 1, 3], [0, 2, 3, 5]]
    assert tensors(spec, "Dense")["shape_0d_fp32.bin"][2] == ()

    # In place, with a graph and updater state (and tensors shared with Dense: none).
    run_cli(
        "pack",
        ar,
        PADDLE_FIXTURES / "mlp_persistables",
        "--tag",
        "step-1",
        "--graph",
        MLP_MODEL,
        "--updater",
        make_updater(tmp),
        "-q",
    )
    spec = check(ar)
    assert spec["default"] == "step-1"
    assert spec["tag"]["step-1"]["graph"][0] == "programdesc"
    assert spec["tag"]["step-1"]["updater_entries"]["fc_0.w_0"] == [
        "step-1/updater/0.lodtensor",
        "step-1/updater/1.lodtensor",
    ]

    # Rewrite: every tensor and the updater state shared with step-1 (TAG/N refs).
    run_cli(
        "pack",
        ar,
        PADDLE_FIXTURES / "mlp_persistables",
        "--tag",
        "step-2",
        "--graph",
        MLP_MODEL,
        "--updater",
        make_updater(tmp / "again"),
        "--rewrite",
        "-q",
    )
    spec = check(ar)
    assert all(e.startswith("step-1/") for e in spec["tag"]["step-2"]["entries"])
    assert all(
        e.startswith("step-1/updater/")
        for es in spec["tag"]["step-2"]["updater_entries"].values()
        for e in es
    )
    with SpecArchive(ar) as sa:
        assert sa.tag("step-2").shared() == {"graph.pdmodel": "step-1"}


# ---- rm, prune, compact ------------------------------------------------------------


def shared_archive(tmp: Path) -> Path:
    """Four tags that share tensor files and a graph with the oldest."""
    ar = tmp / "s.zip"
    up = make_updater(tmp)
    for tag in ("t1", "t2", "t3"):
        run_cli(
            "pack",
            ar,
            PADDLE_FIXTURES / "mlp_persistables",
            "--tag",
            tag,
            "--graph",
            MLP_MODEL,
            "--updater",
            up,
            "-q",
        )
    run_cli("quantize", ar, "--from", "t3", "--tag", "t4", "-q")
    return ar


@pytest.mark.parametrize("in_place", [False, True], ids=["rewrite", "in_place"])
def test_rm_prune_compact(tmp: Path, in_place: bool):
    ar = shared_archive(tmp)
    before = check(ar)
    flag = ["--in-place"] if in_place else []
    run_cli("rm", ar, "T1", *flag, "-q")  # the owner of everything
    spec = check(ar)
    assert spec["tags"] == ["t2", "t3", "t4"]
    # Re-homed into t2, the oldest user, with the same bytes.
    assert all(e.startswith("t2/") for e in spec["tag"]["t3"]["entries"])
    assert spec["tag"]["t3"]["params"] == before["tag"]["t3"]["params"]
    assert spec["tag"]["t3"]["updater"] == before["tag"]["t3"]["updater"]
    with SpecArchive(ar) as sa:
        assert sa.tag("t2").shared() == {}
        assert sa.tag("t3").shared() == {"graph.pdmodel": "t2"}
    run_cli("prune", ar, "--keep", "2", *flag, "-q")
    spec = check(ar)
    assert spec["tags"] == ["t3", "t4"]
    assert spec["tag"]["t4"]["params"] == before["tag"]["t4"]["params"]
    run_cli("compact", ar, "-q")
    assert check(ar) == spec


# ---- quantize, cast ----------------------------------------------------------------


def test_quantize_and_cast(tmp: Path):
    ar = tmp / "v.zip"
    run_cli("import-paddle", ar, "--tag", "fp32", MLP_MODEL, MLP_PARAMS, "-q")
    run_cli("quantize", ar, "--from", "fp32", "--tag", "int8", "-q")
    run_cli("quantize", ar, "--from", "fp32", "--tag", "int8-pc", "--per-channel", "-q")
    run_cli("cast", ar, "--from", "fp32", "--tag", "fp16", "--dtype", "fp16", "-q")
    run_cli("cast", ar, "--from", "fp32", "--tag", "bf16", "--dtype", "bf16", "-q")
    spec = check(ar)
    assert tensors(spec, "int8")["fc_0.w_0"][1] == "int8"
    assert tensors(spec, "int8")["fc_0.w_0@scale"][2] == (1,)
    assert tensors(spec, "int8-pc")["fc_0.w_0@scale"][2] == (16,)  # one scale per output channel
    assert tensors(spec, "fp16")["fc_0.w_0"][1] == "float16"
    assert tensors(spec, "bf16")["fc_0.w_0"][1] == "bfloat16"
    assert "quantization" in spec["tag"]["int8"]["metadata"]
    assert "cast" in spec["tag"]["bf16"]["metadata"]


# ---- imports and convert -----------------------------------------------------------


def test_imports(tmp: Path):
    ar = tmp / "i.zip"
    st = FIXTURES / "safetensors"
    run_cli("import", ar, "--tag", "st", st / "all_dtypes.safetensors", "-q")
    run_cli(
        "import", ar, "--tag", "st-sharded", st / "sharded" / "model.safetensors.index.json", "-q"
    )
    run_cli("import", ar, "--tag", "onnx", FIXTURES / "onnx" / "mlp.onnx", "-q")
    run_cli("import", ar, "--tag", "tf", FIXTURES / "tf" / "mlp.pb", "-q")
    run_cli("import", ar, "--tag", "paddle", MLP_MODEL, MLP_PARAMS, "-q")
    run_cli(
        "import-paddle",
        ar,
        "--tag",
        "conv",
        PADDLE_FIXTURES / "conv.pdmodel",
        PADDLE_FIXTURES / "conv.pdiparams",
        "-q",
    )
    run_cli(
        "import-paddle", ar, "--tag", "dir", "--dir", PADDLE_FIXTURES / "mlp_persistables", "-q"
    )
    spec = check(ar)
    assert "safetensors" in spec["tag"]["st"]["metadata"]
    assert spec["tag"]["paddle"]["graph"] == ("programdesc", MLP_MODEL.read_bytes())
    assert spec["tag"]["onnx"]["graph"][0] == "flatbuffers"
    # The persistables directory has the same tensors as the inference model: all shared.
    assert all(e.startswith("paddle/") for e in spec["tag"]["dir"]["entries"])


def test_convert_and_shared_graphs(tmp: Path):
    ar = tmp / "c.zip"
    for tag in ("a", "b", "c"):
        run_cli("import-paddle", ar, "--tag", tag, MLP_MODEL, MLP_PARAMS, "-q")
    spec = check(ar)
    with SpecArchive(ar) as sa:
        assert [sa.tag(t).shared() for t in ("a", "b", "c")] == [
            {},
            {"graph.pdmodel": "a"},
            {"graph.pdmodel": "a"},
        ]
    assert spec["tag"]["c"]["graph"] == ("programdesc", MLP_MODEL.read_bytes())
    # Converting the owner moves the old graph into its oldest user first.
    run_cli("convert", ar, "--tag", "a", "--to", "flatbuffers", "-q")
    spec = check(ar)
    assert spec["tag"]["a"]["graph"][0] == "flatbuffers"
    assert spec["tag"]["c"]["graph"] == ("programdesc", MLP_MODEL.read_bytes())
    with SpecArchive(ar) as sa:
        assert sa.tag("b").shared() == {} and sa.tag("c").shared() == {"graph.pdmodel": "b"}
    run_cli("convert", ar, "--tag", "a", "--to", "programdesc", "-q")
    spec = check(ar)
    assert spec["tag"]["a"]["graph"] == ("programdesc", MLP_MODEL.read_bytes())  # lossless


# ---- the Python writers ------------------------------------------------------------


def test_python_save_and_checkpointer(tmp: Path):
    rng = np.random.default_rng(3)
    params = {
        "fc.w": rng.standard_normal((4, 3)).astype(np.float32),
        "fc.b": np.zeros(3, np.float16),
        "emb": rng.integers(0, 9, (5,), dtype=np.int64),
        "odd name%": np.array(True),
    }
    state = {"fc.w": [np.ones((4, 3), np.float32), np.full((4, 3), 2, np.float32)]}
    ar = tmp / "p.zip"
    modelzip.save(
        ar,
        "first",
        params,
        updater=state,
        metadata={"lr": 0.01, "note": "x"},
        graph=MLP_MODEL.read_bytes(),
    )
    modelzip.save(ar, "Second", params, updater=state, graph=MLP_MODEL.read_bytes())
    spec = check(ar)
    assert spec["tag"]["first"]["metadata"]["note"] == "x"
    assert all(e.startswith("first/") for e in spec["tag"]["Second"]["entries"])
    with SpecArchive(ar) as sa:
        assert sa.tag("second").shared() == {"graph.pdmodel": "first"}

    ck_path = tmp / "ck.zip"
    ck = modelzip.Checkpointer(ck_path, keep_last=2, compact_dead_fraction=1.0)
    for step in range(4):
        params["fc.w"] = params["fc.w"] + 1  # fc.b, emb and "odd name%" stay: shared
        ck.save(
            step,
            params,
            updater={"fc.w": [params["fc.w"], params["fc.w"] * 2]},
            metrics={"loss": 1.0 / (step + 1)},
        )
    spec = check(ck_path)  # in-place retention left dead bytes
    assert spec["tags"] == ["step-000000002", "step-000000003"]
    assert tensors(spec, "step-000000003")["fc.w"][4] == params["fc.w"].tobytes()
    ck2 = modelzip.Checkpointer(ck_path, keep_last=1, compact_dead_fraction=0.0)
    ck2.save(4, params, metrics={"loss": 0.1})  # and compacts
    assert check(ck_path)["tags"] == ["step-000000004"]


# ---- the other direction: an archive written from FORMAT.md alone -------------------


CREATED = "2026-11-26T00:00:00Z"
RNG = np.random.default_rng(11)
W = RNG.standard_normal((2, 3)).astype(np.float32)
SEQ = np.arange(5, dtype=np.int64).reshape(5, 1)
FLAG = np.array(True)
B = np.array([1, 2, 3], np.float16)
M = RNG.standard_normal((2, 3)).astype(np.float32)
V1, V2 = M * 2, M * 3


def write_spec_archive(
    path: Path,
    *,
    override: dict | None = None,
    extra_tags: tuple = (),
    sums: bool = True,
    deflate: tuple = (),
) -> Path:
    """Two tags; `Next` shares base's weight (base/0), its first updater array, its graph and
    its trainingConfig.fb. `override` replaces a file's bytes ("tag/rel": bytes); the
    tensor entries named in `deflate` are deflated instead of stored and aligned."""
    override = override or {}
    w = SpecWriter(path)

    def file(tag, rel, data):
        w.file(tag, rel, override.pop(f"{tag}/{rel}", data))

    def tensor(tag, kind, n, array, lod=()):
        name = f"{tag}/{kind}/{n}.lodtensor"
        if name in deflate:  # FORMAT.md: readers accept deflated (and unaligned) tensors
            w.file(tag, f"{kind}/{n}.lodtensor", lodtensor(array, lod)[0], deflate=True)
        elif name in override:
            w.record(tag, kind, n, override.pop(name), 0, align=False)
        else:
            w.tensor(tag, kind, n, array, lod)

    tensor("base", "params", 0, W)
    tensor("base", "params", 1, SEQ, [[0, 2, 5]])
    tensor("base", "params", 2, FLAG)
    tensor("base", "updater", 0, M)
    tensor("base", "updater", 1, V1)
    file("base", "params.txt", b"fc.w 0\nseq 1\nname%20with%25/x 2\n")
    file("base", "updater.txt", b"fc.w 0 1\n")
    file("base", "graph.pdmodel", MLP_MODEL.read_bytes())
    file("base", "trainingConfig.fb", training_config("adam", ["m", "v"]))
    file("base", "metadata.json", b'{"created": "%s", "note": "spec"}' % CREATED.encode())
    tensor("Next", "params", 0, B)
    tensor("Next", "updater", 0, V2)
    file("Next", "params.txt", b"fc.w base/0\nfc.b 0\n")
    file("Next", "updater.txt", b"fc.w BASE/0 0\n")
    file("Next", "shared.txt", b"graph.pdmodel base\ntrainingConfig.fb base\n")
    file("Next", "metadata.json", b'{"created": "%s"}' % CREATED.encode())
    tags = ["base", "Next", *extra_tags]
    replace = {
        t: override.pop(f"{t}/sha256sums.txt") for t in tags if f"{t}/sha256sums.txt" in override
    }
    for name, data in list(override.items()):  # entries the caller adds
        w.entry(name, data)
    w.close(tags, sums=sums, replace=replace)
    return path


def test_modelzip_reads_the_spec_writers_archive(tmp: Path):
    ar = write_spec_archive(tmp / "spec.zip")
    spec = check(ar, ours=False)  # verify passes, modelzip and the spec reader agree
    assert spec["tags"] == ["base", "Next"] and spec["default"] == "Next"
    with modelzip.open(ar) as z:
        assert z.verify() == []
        base, nxt = z["BASE"], z["next"]
        assert base.keys() == ["fc.w", "seq", "name with%/x"]
        np.testing.assert_array_equal(base["fc.w"], W)
        assert base.lod("seq") == [[0, 2, 5]]
        assert base["name with%/x"].shape == () and bool(base["name with%/x"]) is True
        np.testing.assert_array_equal(nxt["fc.w"], W)
        assert np.shares_memory(nxt["fc.w"], base["fc.w"])  # one file
        np.testing.assert_array_equal(nxt["fc.b"], B)
        assert [a.tolist() for a in nxt.updater("fc.w")] == [M.tolist(), V2.tolist()]
        assert nxt.graph_encoding == "programdesc" and nxt.graph_bytes() == MLP_MODEL.read_bytes()
        assert base.metadata == {"created": CREATED, "note": "spec"}
    with SpecArchive(ar) as sa:  # the training config Next shares with base
        assert sa.tag("Next").training_config() == sa.tag("base").training_config()
        assert sa.tag("Next").training_config()[4:8] == b"MZTC"
    show = cli_json("show", ar, "--tag", "Next")
    assert [p["shared_from"] for p in show["params"]] == ["base", None]


def test_pack_appends_in_place_to_the_spec_writers_archive(tmp: Path):
    ar = write_spec_archive(tmp / "spec.zip")
    before = ar.read_bytes()
    with SpecArchive(ar) as sa:
        directory_at = sa.zip.start_dir  # the old central directory
    out = cli_json(
        "pack", ar, PADDLE_FIXTURES / "mlp_persistables", "--tag", "added", "--graph", MLP_MODEL
    )
    assert out["mode"] == "in_place"
    assert ar.read_bytes()[:directory_at] == before[:directory_at]  # the old entries untouched
    spec = check(ar)
    assert spec["tags"] == ["base", "Next", "added"]
    with SpecArchive(ar) as sa:
        assert sa.tag("added").shared() == {"graph.pdmodel": "base"}  # the graph is base's


@pytest.mark.parametrize("version", [1, 2])
def test_the_spec_writers_summary_is_current_for_modelzip(tmp: Path, version: int):
    """A _summary.txt whose fingerprint the spec's recipe computes is used by modelzip (the
    version it writes, 2, and version 1, which older modelzips wrote): a record that lies
    (one param instead of three) shows in `tags` and `verify` reports it."""
    path = write_spec_archive(tmp / "plain.zip")
    with SpecArchive(path) as sa:
        records = [sa.describe(t) for t in sa.tags]

    def summary(lie: bool) -> bytes:
        lines = []
        for r in records:
            params = 1 if lie and r["tag"] == "base" else r["params"]
            line = (
                f"{r['tag']} {params} {r['updater']} {r['shared']} {r['graph'] or '-'} "
                f"{','.join(r['dtypes']) or '-'} {r['created'] or '-'}"
            )
            if version == 2:
                line += f" {'-' if r['sharded'] is None else r['sharded']}"
            lines.append(line)
        with SpecArchive(path) as sa:
            # The directory without _summary.txt: the same.
            count, fp = sa.fingerprint(version)
        return (
            f"modelzip-summary {version} {count} {fp}\n" + "".join(line + "\n" for line in lines)
        ).encode()

    for lie in (False, True):
        ar = tmp / f"summary-{lie}.zip"
        shutil.copy(path, ar)
        with zipfile.ZipFile(ar, "a") as z:  # the summary, last entry
            z.writestr("_summary.txt", summary(lie))
        with SpecArchive(ar) as sa:
            assert sa.summary() is not None  # current by the spec's recipe
        tags = cli_json("tags", ar)["tags"]
        assert [t["params"] for t in tags] == ([1, 2] if lie else [3, 2])
        problems = run_cli("verify", ar, check=False)
        assert (problems.returncode != 0) == lie, problems.stdout + problems.stderr
        if lie:
            assert "_summary.txt" in problems.stdout + problems.stderr


def test_a_summary_another_tool_made_stale_is_ignored(tmp: Path):
    """Any entry added by another tool changes the fingerprint: the summary is stale, and
    both readers fall back to the tables."""
    ar = tmp / "stale.zip"
    run_cli("import-paddle", ar, "--tag", "fp32", MLP_MODEL, MLP_PARAMS, "-q")
    with SpecArchive(ar) as sa:
        assert sa.summary() is not None
    with zipfile.ZipFile(ar, "a") as z:
        z.writestr("notes/readme.txt", b"added by another tool")
    with SpecArchive(ar) as sa:
        assert sa.has("_summary.txt") and sa.summary() is None  # stale
        assert sa.describe("fp32")["params"] == 4
    assert [t["params"] for t in cli_json("tags", ar)["tags"]] == [4]


def desc_record(desc: bytes, data: bytes) -> bytes:
    """A LoDTensor record with a hand-made TensorDesc."""
    return struct.pack("<IQIi", 0, 0, 0, len(desc)) + desc + data


# Archives FORMAT.md (as amended) says readers accept: (override, what both readers read).
ACCEPTED = {
    # \r\n, a whitespace-only line, no final line end.
    "crlf_blank_lines_no_final_lf": (
        {"Next/params.txt": b"\r\nfc.w base/0\r\n \t\r\nfc.b 0"},
        {"fc.w": W, "fc.b": B},
    ),
    # A ref may name its own tag, in any case: the same file as `N`.
    "ref_naming_its_own_tag": ({"Next/params.txt": b"fc.w base/0\nfc.b NEXT/0\n"}, {"fc.b": B}),
    # TensorDesc by protobuf rules: an unknown field is skipped, dims may be packed.
    "tensordesc_unknown_field_and_packed_dims": (
        {"Next/params/0.lodtensor": desc_record(b"\x08\x04\x18\x07\x12\x01\x03", B.tobytes())},
        {"fc.b": B},
    ),
}


@pytest.mark.parametrize("case", sorted(ACCEPTED))
def test_both_readers_accept_what_the_spec_allows(tmp: Path, case: str):
    override, expect = ACCEPTED[case]
    ar = write_spec_archive(tmp / f"{case}.zip", override=dict(override))
    spec = check(ar, ours=False)  # both read the same; verify passes
    got = tensors(spec, "Next")
    for name, array in expect.items():
        assert got[name][4] == array.tobytes() and got[name][2] == array.shape
    with SpecArchive(ar) as sa:
        # a self reference is no shared file
        assert [r.tag for r in map(sa.tag("Next").param_ref, ("fc.w", "fc.b"))] == ["base", "Next"]


def test_deflated_tensors_are_read_and_kept(tmp: Path):
    """Tensor entries another tool deflated (so not aligned either) read the same through
    both readers, and copies (compact) keep them as they are."""
    deflated = ("base/params/0.lodtensor", "base/params/1.lodtensor", "Next/updater/0.lodtensor")
    ar = write_spec_archive(tmp / "deflated.zip", deflate=deflated)
    with SpecArchive(ar) as sa:
        assert all(sa.entries[e].compress_type == zipfile.ZIP_DEFLATED for e in deflated)
    spec = check(ar, ours=False)
    assert tensors(spec, "base")["seq"][3] == [[0, 2, 5]]
    run_cli("compact", ar, "-q")
    with SpecArchive(ar) as sa:
        assert all(sa.entries[e].compress_type == zipfile.ZIP_DEFLATED for e in deflated)
    assert check(ar, ours=False) == spec


def test_tag_files_are_under_the_tags_txt_spelling(tmp: Path):
    """Tags are looked up ignoring case, but a tag's files are under `<tag>/` spelled as
    tags.txt spells it: `next/...` is not a file of the tag `Next`."""
    ar = tmp / "spelling.zip"
    w = SpecWriter(ar)
    w.tensor("next", "params", 0, B)
    w.table("next", "params.txt", [("fc.b", ["0"])])
    w.close(["Next"], sums=False)
    with SpecArchive(ar) as sa:
        assert sa.tag("next").name == "Next" and sa.tag("next").param_names() == []
    with modelzip.open(ar) as z:
        assert z["next"].name == "Next" and z["next"].keys() == []
    proc = run_cli("verify", ar, check=False)
    assert proc.returncode == 1 and "files under next/" in proc.stdout, proc.stdout


def test_sha256sums_forms_readers_accept(tmp: Path):
    """` *` (binary mode) and uppercase hex are accepted; a tag without the file too."""
    ar = write_spec_archive(tmp / "plain.zip")
    with SpecArchive(ar) as sa:
        own = {n.split("/", 1)[1]: sa.read(n) for n in sa.tag_files("Next")}
    own.pop("sha256sums.txt")
    sums = "".join(f"{hashlib.sha256(d).hexdigest().upper()} *{rel}\n" for rel, d in own.items())
    ar = write_spec_archive(tmp / "forms.zip", override={"Next/sha256sums.txt": sums.encode()})
    with SpecArchive(ar) as sa:
        assert sorted(sa.tag("Next").check_sha256sums()) == sorted(own)
    run_cli("verify", ar, "-q")
    ar = write_spec_archive(tmp / "none.zip", sums=False)
    with SpecArchive(ar) as sa:
        assert sa.tag("Next").check_sha256sums() == []
    run_cli("verify", ar, "-q")


def bad_record(version: int = 0, tensor_version: int = 0, trailing: bytes = b"") -> bytes:
    record, _ = lodtensor(W)
    return (
        struct.pack("<I", version)
        + record[4:12]
        + struct.pack("<I", tensor_version)
        + record[16:]
        + trailing
    )


NEGATIVE = {
    # what is wrong: (override, the entry the error must name)
    "ref_to_missing_tag": ({"Next/params.txt": b"fc.w gone/0\nfc.b 0\n"}, "Next/params.txt"),
    "ref_to_missing_file": ({"Next/params.txt": b"fc.w base/7\nfc.b 0\n"}, "Next/params.txt"),
    "ref_with_leading_zero": ({"Next/params.txt": b"fc.w base/00\nfc.b 0\n"}, "Next/params.txt"),
    "bad_percent_escape": ({"Next/params.txt": b"fc%zz base/0\nfc.b 0\n"}, "Next/params.txt"),
    "duplicate_name": ({"Next/params.txt": b"fc.w base/0\nfc.w 0\n"}, "Next/params.txt"),
    "updater_ref_to_missing_tag": ({"Next/updater.txt": b"fc.w gone/0 0\n"}, "Next/updater.txt"),
    "lodtensor_version": (
        {"base/params/0.lodtensor": bad_record(version=1)},
        "base/params/0.lodtensor",
    ),
    "tensor_version": (
        {"base/params/0.lodtensor": bad_record(tensor_version=2)},
        "base/params/0.lodtensor",
    ),
    "bytes_after_record": (
        {"base/params/0.lodtensor": bad_record(trailing=b"\0")},
        "base/params/0.lodtensor",
    ),
    "unknown_dtype": (
        {"Next/params/0.lodtensor": lodtensor(B, dtype=17)[0]},
        "Next/params/0.lodtensor",
    ),
    "lod_not_ending_at_dims0": (
        {"base/params/1.lodtensor": lodtensor(SEQ, [[0, 2, 4]])[0]},
        "base/params/1.lodtensor",
    ),
    "shared_self": ({"Next/shared.txt": b"graph.pdmodel next\n"}, "Next/shared.txt"),
    "shared_owner_lacks_file": ({"Next/shared.txt": b"graph.fb base\n"}, "Next/shared.txt"),
    "shared_and_own": (
        {"Next/shared.txt": b"graph.pdmodel base\n", "Next/graph.pdmodel": MLP_MODEL.read_bytes()},
        "Next/shared.txt",
    ),
    "tags_equal_ignoring_case": ({}, "tags.txt"),
    "shared_reference_to_a_reference": (
        {"Third/shared.txt": b"graph.pdmodel Next\n", "Third/params.txt": b""},
        "Third/shared.txt",
    ),
    "too_many_updater_refs": (
        {"Next/updater.txt": b"fc.w" + b" 0" * 257 + b"\n"},
        "Next/updater.txt",
    ),
    "entry_name_with_dotdot": ({"base/../evil": b"x"}, "base/../evil"),
    "entry_name_with_empty_component": ({"base//x": b"x"}, "base//x"),
    # Rules FORMAT.md did not state before the spec reader asked (now it does).
    "fields_separated_by_two_spaces": (
        {"Next/params.txt": b"fc.w  base/0\nfc.b 0\n"},
        "Next/params.txt",
    ),
    "names_equal_after_decoding": (
        {"Next/params.txt": b"fc.b base/0\nfc%2Eb 0\n"},
        "Next/params.txt",
    ),
    "name_decoding_to_non_utf8": (
        {"Next/params.txt": b"fc%FF base/0\nfc.b 0\n"},
        "Next/params.txt",
    ),
    "lod_size_not_a_multiple_of_8": (
        {
            "base/params/1.lodtensor": struct.pack("<IQQ", 0, 1, 12)
            + bytes(12)
            + lodtensor(SEQ)[0][12:]
        },
        "base/params/1.lodtensor",
    ),
}
# Cases `verify` reports but reading parameters does not touch.
VERIFY_ONLY = {
    "metadata_not_an_object": ({"Next/metadata.json": b"[1, 2]"}, "Next/metadata.json"),
    "sha256_mismatch": ({"Next/sha256sums.txt": b"0" * 64 + b"  params.txt\n"}, "Next/params.txt"),
}


@pytest.mark.parametrize("case", sorted(NEGATIVE))
def test_modelzip_refuses_what_the_spec_forbids(tmp: Path, case: str):
    override, entry = NEGATIVE[case]
    extra = {
        "tags_equal_ignoring_case": ("NEXT",),
        "shared_reference_to_a_reference": ("Third",),
    }.get(case, ())
    ar = write_spec_archive(tmp / f"{case}.zip", override=dict(override), extra_tags=extra)

    # The spec reader refuses it, naming the entry ...
    with pytest.raises(SpecError) as spec_err:
        with SpecArchive(ar) as sa:
            for t in sa.tags:
                tag = sa.tag(t)
                for p in tag.param_names():
                    tag.param(p)
                for u in tag.updater_names():
                    tag.updater(u)
    assert spec_err.value.entry == entry

    # ... and so does modelzip: reading every tag, and `verify`.
    with pytest.raises(modelzip.ModelzipError) as mz_err:
        with modelzip.open(ar) as z:
            for t in z.tags:
                tag = z[t]
                for p in tag.keys():
                    tag[p]
                for u in tag.updater_keys():
                    tag.updater(u)
                tag.graph_bytes()
    assert entry in str(mz_err.value), str(mz_err.value)
    proc = run_cli("verify", ar, check=False)
    assert proc.returncode != 0
    assert entry in proc.stdout + proc.stderr, proc.stdout + proc.stderr


@pytest.mark.parametrize("case", sorted(VERIFY_ONLY))
def test_verify_reports_what_the_spec_forbids(tmp: Path, case: str):
    override, entry = VERIFY_ONLY[case]
    ar = write_spec_archive(tmp / f"{case}.zip", override=dict(override))
    with SpecArchive(ar) as sa:
        with pytest.raises(SpecError) as spec_err:
            t = sa.tag("Next")
            t.metadata()
            t.check_sha256sums()
    assert spec_err.value.entry == entry
    proc = run_cli("verify", ar, check=False)
    assert proc.returncode == 1
    assert entry in proc.stdout, proc.stdout + proc.stderr


TAG_NAMES = {
    "con.tar.gz": False,  # a device name: the part before the first '.' is compared
    "lpt9.x": False,
    "Aux": False,
    "com10": True,
    "COM0": True,
    "CONIN": True,
    "TAGS.TXT": False,
    "tags.txt.bak": True,
    "a..b": True,
    "a.": False,
    "_a": False,
    "9x": True,
    "a" * 128: True,
    "a" * 129: False,
    "a b": False,
}


def test_tag_name_rules_agree(tmp: Path):
    for name, valid in TAG_NAMES.items():
        ar = tmp / "names.zip"
        with zipfile.ZipFile(ar, "w") as z:
            z.writestr("tags.txt", name + "\n")
        if valid:
            with SpecArchive(ar) as sa:
                assert sa.tags == [name]
            with modelzip.open(ar) as z:
                assert z.tags == [name]
        else:
            with pytest.raises(SpecError, match="tags.txt line 1"):
                SpecArchive(ar)
            with pytest.raises(modelzip.ModelzipError, match="tags.txt"):
                modelzip.open(ar)


def test_symlink_entries_are_refused(tmp: Path):
    """FORMAT.md: readers refuse symlink entries (S_IFLNK in the external attributes)."""
    ar = write_spec_archive(tmp / "link.zip")
    with zipfile.ZipFile(ar, "a") as z:
        info = zipfile.ZipInfo("base/link")
        info.external_attr = 0o120777 << 16
        z.writestr(info, "../../etc/passwd")
    with pytest.raises(SpecError) as spec_err:
        SpecArchive(ar)
    assert spec_err.value.entry == "base/link"
    with pytest.raises(modelzip.ModelzipError, match="base/link"):
        modelzip.open(ar)
