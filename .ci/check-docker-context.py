#!/usr/bin/env python3
"""Checks that the container image builds from the repository as it is, without a Docker daemon.

1. The build context: the repository's tracked files (`git ls-files`, what a fresh clone has) less what
   `.dockerignore` excludes, matched as Docker does (Go filepath.Match segments, `**`, `!` exceptions, the last
   matching pattern deciding, a pattern excluding a directory excluding everything under it). A pattern with
   syntax this script does not interpret stops it.
2. The builder stage of the Dockerfile (the stage that runs `cargo build`): its WORKDIR and COPY lines are
   replayed into a directory under $TMPDIR (a fixed path per checkout), so a
   workspace member or an included file the Dockerfile does not copy, or .dockerignore drops, is missing there
   as it would be in the image.
3. The stage's cargo command is run there as `cargo check` (same --locked, -p and --features; no --release or
   --profile, so the dev profile's check artefacts are shared; `-p xtask` added, see UNIFY_WITH), with
   CARGO_TARGET_DIR at the repository's target/, so registry crates already checked by the clippy step are not
   compiled again; the workspace's own crates are checked afresh from the copy every run.

Usage: .ci/check-docker-context.py [--dry-run] [--dockerfile PATH] [--dockerignore PATH]
  --dry-run: lay the context out and print the command only; --dockerfile, --dockerignore: other files than the
  repository's (e.g. an older revision's, from `git show REV:Dockerfile > f`).
"""

import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parent.parent
# Outside the repository (cargo would otherwise also read the repository's .cargo/config.toml, which the image
# may lack), at a fixed path per checkout rather than a new one per run.
OUT = Path(tempfile.gettempdir()) / f"karpenter-docker-context-{hashlib.sha1(str(ROOT).encode()).hexdigest()[:8]}"


def fail(message: str) -> "NoReturn":  # noqa: F821
    print(f"check-docker-context: {message}", file=sys.stderr)
    sys.exit(1)


# --- .dockerignore ------------------------------------------------------------------------------------------


def pattern_regex(pattern: str) -> "re.Pattern[str]":
    """Docker's patternmatcher translation: `**` any number of segments, `*` and `?` within one segment."""
    if re.search(r"[\[\]\\{}]", pattern):
        fail(f".dockerignore pattern {pattern!r}: character classes and escapes are not interpreted here")
    out = "^"
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "*":
            if pattern[i + 1 : i + 2] == "*":
                i += 1
                if i + 1 == len(pattern):
                    out += ".*"
                elif pattern[i + 1] == "/":
                    out += "(.*/)?"
                    i += 1
                else:
                    out += ".*"
            else:
                out += "[^/]*"
        elif ch == "?":
            out += "[^/]"
        else:
            out += re.escape(ch)
        i += 1
    return re.compile(out + "$")


def read_dockerignore(path: Path) -> "list[tuple[bool, re.Pattern[str], str]]":
    rules = []
    if not path.exists():
        return rules
    for number, line in enumerate(path.read_text().splitlines(), 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        exception = text.startswith("!")
        if exception:
            text = text[1:].strip()
        # Docker cleans each pattern (filepath.Clean) and drops a leading slash.
        cleaned = os.path.normpath(text).lstrip("/")
        if cleaned in ("", ".") or cleaned.startswith(".."):
            fail(f".dockerignore line {number}: {line!r} is not a pattern this check interprets")
        rules.append((exception, pattern_regex(cleaned), line))
    return rules


def excluded(path: str, rules) -> bool:
    """Whether Docker leaves `path` out of the context: the last rule matching it or a parent directory."""
    parts = path.split("/")
    candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    verdict = False
    for exception, regex, _ in rules:
        if any(regex.match(c) for c in candidates):
            verdict = not exception
    return verdict


def context_files(dockerignore: Path) -> "list[str]":
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True
    ).stdout.decode()
    rules = read_dockerignore(dockerignore)
    return sorted(f for f in listed.split("\0") if f and (ROOT / f).is_file() and not excluded(f, rules))


# --- Dockerfile ---------------------------------------------------------------------------------------------


def instructions(text: str) -> "list[tuple[str, str]]":
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    out, current = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if current and stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        current += stripped
        if current:
            word, _, rest = current.partition(" ")
            out.append((word.upper(), rest.strip()))
        current = ""
    if current:
        fail("the Dockerfile ends in a line continuation")
    return out


def builder_stage(text: str) -> "list[tuple[str, str]]":
    stages, stage = [], None
    for word, rest in instructions(text):
        if word == "FROM":
            stage = []
            stages.append(stage)
        elif stage is not None:
            stage.append((word, rest))
    for stage in stages:
        if any(word == "RUN" and re.search(r"\bcargo\s+build\b", rest) for word, rest in stage):
            return stage
    fail("no stage of the Dockerfile runs `cargo build`")


def copy_args(rest: str) -> "tuple[list[str], str]":
    if rest.startswith("["):
        fail(f"COPY {rest}: the JSON form is not interpreted here")
    words = shlex.split(rest)
    flags = [w for w in words if w.startswith("--")]
    for flag in flags:
        if not re.match(r"--(chown|chmod|link)(=|$)", flag):
            fail(f"COPY {rest}: {flag} is not interpreted here (only context sources are)")
    words = [w for w in words if not w.startswith("--")]
    if len(words) < 2:
        fail(f"COPY {rest}: needs a source and a destination")
    return words[:-1], words[-1]


def lay_out(stage, files: "list[str]") -> "tuple[Path, str]":
    """Replays WORKDIR and COPY into OUT (standing for the image's /); returns the cargo command's directory
    and the RUN text holding it."""
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    workdir = PurePosixPath("/")
    run = None
    for word, rest in stage:
        if word == "WORKDIR":
            workdir = workdir / rest
        elif word == "ADD":
            fail(f"ADD {rest}: not interpreted here; use COPY")
        elif word == "COPY":
            sources, dest = copy_args(rest)
            target = workdir / dest
            into_dir = dest.endswith("/") or dest in (".", "./") or len(sources) > 1
            for source in sources:
                source = os.path.normpath(source).lstrip("/")
                regex = pattern_regex(source)
                matched = [f for f in files if regex.match(f)]
                under = [f for f in files if f.startswith(source + "/") or source == "."]
                if matched:
                    for f in matched:
                        to = target / PurePosixPath(f).name if into_dir else target
                        place(f, to)
                elif under:
                    # A directory: its contents go into the destination.
                    prefix = "" if source == "." else source + "/"
                    for f in under:
                        place(f, target / f[len(prefix) :])
                else:
                    fail(f"COPY {rest}: {source} is not in the build context (missing, or .dockerignore drops it)")
        elif word == "RUN" and re.search(r"\bcargo\s+build\b", rest):
            run = rest
    return OUT / str(workdir).lstrip("/"), run


def place(source: str, dest: PurePosixPath) -> None:
    to = OUT / str(dest).lstrip("/")
    to.parent.mkdir(parents=True, exist_ok=True)
    # Fresh modification times: every workspace crate the command needs is checked again from this copy, so an
    # embedded file the context lacks fails here even when an artefact built elsewhere records it as present
    # (cargo's dep-info keeps files outside a package, such as crds/, by absolute path).
    shutil.copy(ROOT / source, to)


# Checked beside the image's package only so that dependency features unify as in the clippy step: xtask's nix
# turns on libc's `extra_traits`, which changes the artefact hash of tokio and of every crate above it (the AWS
# SDK among them). Without it a fresh CI machine checks some 400 crates a second time (7 minutes on 2 cores).
# xtask is a workspace member the context must hold anyway.
UNIFY_WITH = ["xtask"]


def check_command(run: str) -> "list[str]":
    """The stage's `cargo build ...` as `cargo check ...`, without --release or --profile, plus UNIFY_WITH."""
    match = re.search(r"\bcargo\s+build\b([^&;|]*)", run)
    words = shlex.split(match.group(1))
    out, features, packages, skip = ["cargo", "check"], [], [], None
    for w in words:
        if skip == "--profile":
            skip = None
        elif skip in ("-p", "--package"):
            packages.append(w)
            out += [skip, w]
            skip = None
        elif skip in ("-F", "--features"):
            features += re.split(r"[ ,]+", w.strip())
            skip = None
        elif w in ("--profile", "-p", "--package", "-F", "--features"):
            skip = w
        elif w == "--release" or w.startswith("--profile="):
            pass
        elif w.startswith(("--package=", "--features=")):
            fail(f"`{w}` in the Dockerfile's cargo command: write the value as a separate word")
        else:
            out.append(w)
    if len(packages) != 1:
        fail(f"the Dockerfile's cargo command builds {packages or 'no -p package'}; one -p package expected")
    for extra in UNIFY_WITH:
        out += ["-p", extra]
    if features:
        out += ["--features", ",".join(f if "/" in f else f"{packages[0]}/{f}" for f in features if f)]
    return out


def main() -> None:
    args = sys.argv[1:]
    dry_run = "--dry-run" in args
    args = [a for a in args if a != "--dry-run"]
    paths = {"--dockerfile": ROOT / "Dockerfile", "--dockerignore": ROOT / ".dockerignore"}
    while args:
        if len(args) < 2 or args[0] not in paths:
            fail(f"unexpected arguments {args}; see the usage at the top of this file")
        paths[args[0]] = Path(args[1]).resolve()
        args = args[2:]
    files = context_files(paths["--dockerignore"])
    stage = builder_stage(paths["--dockerfile"].read_text())
    cwd, run = lay_out(stage, files)
    command = check_command(run)
    copied = sum(1 for p in OUT.rglob("*") if p.is_file())
    print(f"build context: {len(files)} files; {copied} copied into {OUT} as the builder stage lays them out")
    print(f"running in {cwd}: {shlex.join(command)} (CARGO_TARGET_DIR={ROOT / 'target'})", flush=True)
    if dry_run:
        return
    env = dict(os.environ, CARGO_TARGET_DIR=str(ROOT / "target"))
    result = subprocess.run(command, cwd=cwd, env=env)
    if result.returncode != 0:
        fail(
            "the image's cargo command fails on the build context the Dockerfile and .dockerignore give "
            "(a workspace member or an included file not copied?)"
        )


if __name__ == "__main__":
    main()
