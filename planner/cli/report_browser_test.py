"""//planner/cli:report_browser_test: the pictures `dcp` draws, as a browser shows them.

Renders, in headless Chromium from Debian, `dcp plan --format=svg` (a
skewed long-tail batch on 4 x 8 GPUs, heterogeneous SP groups) and the page
`dcp simulate --report=DIR` writes, takes screenshots and checks that:
  - neither screenshot is blank (many non-white pixels, several colours);
  - every row of the timeline is where the plan puts it: for each SP group
    (read from the SVG with a real XML parser), the pixel in the middle of
    its first bar has that bar's colour, and the pixels between rows do not.

Skips, with a message saying so, where no Chromium is installed
(scripts/install_deps.sh installs Debian's `chromium` when it can).
"""

import os
import shutil
import struct
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
import zlib

SVG = "{http://www.w3.org/2000/svg}"


def runfile(path):
    for variable in ("TEST_SRCDIR", "RUNFILES_DIR"):
        root = os.environ.get(variable)
        if root and os.path.exists(os.path.join(root, "dcp", path)):
            return os.path.join(root, "dcp", path)
    return path  # run by hand from the repository root after `bazel build`


def browser():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def decode_png(data):
    """(width, height, rows of (r, g, b)) of an 8-bit RGB or RGBA PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    position = 8
    idat = b""
    width = height = 0
    channels = 0
    while position < len(data):
        length, kind = struct.unpack(">I4s", data[position:position + 8])
        body = data[position + 8:position + 8 + length]
        position += 12 + length
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and interlace == 0, f"unsupported PNG depth {depth}"
            channels = {2: 3, 6: 4}[color]
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    raw = zlib.decompress(idat)
    stride = width * channels
    rows = []
    previous = bytearray(stride)
    offset = 0
    for _ in range(height):
        kind = raw[offset]
        line = bytearray(raw[offset + 1:offset + 1 + stride])
        offset += 1 + stride
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = previous[i]
            up_left = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                estimate = left + up - up_left
                pa, pb, pc = abs(estimate - left), abs(estimate - up), abs(estimate - up_left)
                predictor = left if pa <= pb and pa <= pc else up if pb <= pc else up_left
                line[i] = (line[i] + predictor) & 0xFF
        rows.append([tuple(line[x * channels:x * channels + 3]) for x in range(width)])
        previous = line
    return width, height, rows


def screenshot(chromium, url, width, height, directory, name):
    path = os.path.join(directory, name)
    result = subprocess.run(
        [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         "--no-first-run", f"--user-data-dir={os.path.join(directory, 'profile')}",
         f"--window-size={width},{height}", f"--screenshot={path}", url],
        capture_output=True, text=True, timeout=120)
    if not os.path.exists(path):
        raise AssertionError(f"{chromium} wrote no screenshot ({result.returncode}):\n{result.stderr[-2000:]}")
    with open(path, "rb") as f:
        return decode_png(f.read())


def hex_color(text):
    text = text.lstrip("#")
    return tuple(int(text[i:i + 2], 16) for i in (0, 2, 4))


def close(a, b, tolerance=12):
    return all(abs(x - y) <= tolerance for x, y in zip(a, b))


FAILURES = []


def check(name, ok, detail=""):
    print(f"{'PASS' if ok else 'FAIL'} {name}" + (f": {detail}" if detail and not ok else ""), flush=True)
    if not ok:
        FAILURES.append(name)


def not_blank(name, rows):
    pixels = [p for row in rows for p in row]
    non_white = sum(1 for p in pixels if not close(p, (255, 255, 255), 6))
    colours = len({(r // 16, g // 16, b // 16) for r, g, b in pixels})
    check(f"{name}: not blank ({non_white} of {len(pixels)} pixels non-white, {colours} colours)",
          non_white > len(pixels) // 20 and colours >= 6)


def check_timeline(chromium, dcp, work):
    svg_path = os.path.join(work, "plan.svg")
    with open(svg_path, "w") as out:
        subprocess.run([dcp, "plan", "--model=llama3-8b", "--workload=longtail", "--nodes=4",
                        "--gpus-per-node=8", "--step=4", "--seed=1", "--format=svg"],
                       stdout=out, check=True, timeout=120)
    root = ElementTree.parse(svg_path).getroot()
    width, height = int(root.get("width")), int(root.get("height"))
    _, _, rows = screenshot(chromium, "file://" + svg_path, width, height, work, "plan.png")
    not_blank("dcp plan --format=svg", rows)
    groups = root.findall(f".//{SVG}g[@class='row']")
    check(f"the timeline has a row per SP group ({len(groups)})", len(groups) >= 2)
    placed = 0
    for group in groups:
        bar = group.find(f"{SVG}rect[@class='bar']")
        x = float(bar.get("x")) + float(bar.get("width")) / 2
        y = float(bar.get("y")) + float(bar.get("height")) / 2
        expected = hex_color(bar.get("fill"))
        seen = rows[int(y)][int(x)]
        ranks = group.get("data-ranks")
        if close(seen, expected):
            placed += 1
        else:
            check(f"row of ranks {ranks} at y={y:.0f}", False, f"pixel {seen}, bar colour {expected}")
        # Between this row and the next (1 px of margin): not the bar's colour.
        gap_y = int(float(bar.get("y")) - 1)
        if gap_y >= 0 and close(rows[gap_y][int(x)], expected, 4):
            check(f"row of ranks {ranks} ends where the plan says", False, f"pixel above is {expected}")
    check(f"every row's first bar is drawn where the plan puts it ({placed} of {len(groups)})",
          placed == len(groups))


def check_report(chromium, dcp, work):
    report = os.path.join(work, "report")
    subprocess.run([dcp, "simulate", "--model=llama3-8b", "--workload=longtail", "--nodes=2",
                    "--gpus-per-node=8", "--steps=3", "--seed=1", f"--report={report}"],
                   check=True, timeout=300, capture_output=True)
    _, _, rows = screenshot(chromium, "file://" + os.path.join(report, "index.html"), 1280, 1200, work,
                            "report.png")
    not_blank("dcp simulate --report", rows)


def main():
    chromium = browser()
    if chromium is None:
        print("SKIPPED report_browser_test: no Chromium installed (chromium, chromium-browser or "
              "google-chrome on PATH); scripts/install_deps.sh installs Debian's chromium where it can")
        return 0
    dcp = runfile("planner/cli/dcp")
    work = tempfile.mkdtemp(prefix="report_browser_test.", dir=os.environ.get("TEST_TMPDIR"))
    check_timeline(chromium, dcp, work)
    check_report(chromium, dcp, work)
    print(f"report_browser_test: {'all checks passed' if not FAILURES else f'{len(FAILURES)} failed'}")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
