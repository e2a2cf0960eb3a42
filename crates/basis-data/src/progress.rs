//! Progress bars (indicatif) that disappear in quiet mode and when stderr is not a terminal.

use indicatif::{ProgressBar, ProgressStyle};

fn styled(bar: ProgressBar, template: &str, msg: &str) -> ProgressBar {
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style);
    }
    bar.set_message(msg.to_string());
    bar
}

/// A bar over `len` bytes (hidden when `show` is false).
pub fn bytes(len: u64, msg: &str, show: bool) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    styled(
        ProgressBar::new(len),
        "{msg} [{bar:30}] {bytes}/{total_bytes} ({eta})",
        msg,
    )
}

/// A bar over `len` items (hidden when `show` is false).
pub fn count(len: u64, msg: &str, show: bool) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    styled(
        ProgressBar::new(len),
        "{msg} [{bar:30}] {pos}/{len} ({eta})",
        msg,
    )
}
