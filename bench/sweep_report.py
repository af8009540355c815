"""The model sweep's rows and tables (bench/model_sweep.py): a failure's stage and cause, the
results file, and the per-library summary with the failures grouped by cause."""

import csv
import os
import re
import statistics

# ---------------------------------------------------------------------------------------------
# A row and its first failure


def first_line(text):
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:400]
    return ""


def error_line(output):
    """The line of a placer or onnx_step_check output that says what went wrong."""
    for pattern in (r"error:", r"^mismatch:", r"Traceback|Error|terminate|Aborted"):
        for line in output.splitlines():
            if re.search(pattern, line):
                return line.strip()[:400]
    return first_line(output)


COLUMNS = ["model", "library", "family", "task", "params", "input", "exported", "loads", "step",
           "f32_vs_f64", "compare", "stage", "cause", "error", "unused", "frozen", "export_s",
           "inspect_s", "step_s", "compare_s"]


def ill_conditioned(row):
    try:
        return float(row["f32_vs_f64"]) > 1
    except ValueError:
        return False


def fail(row, stage, prefix, output):
    """Records the first failing stage of a row (later stages' failures are in their columns)."""
    if row["stage"]:
        return
    row["stage"] = stage
    row["error"] = prefix + error_line(output)
    row["cause"] = cause_of(row)


def cause_of(row):
    """The cause a failed row is grouped under."""
    if row["stage"] == "step" and row["step"] == "differs":
        if ill_conditioned(row):
            return ("step differs, but ill-conditioned at this size: PyTorch's own float32 step "
                    "misses the tolerance against its float64 step too")
        if row["frozen"]:
            return "step: placer trains parameters PyTorch freezes (requires_grad=False)"
        if row["unused"]:
            return ("step: PyTorch parameters the forward never uses (not in the ONNX graph, "
                    "the comparison wants them)")
    return normalize(row["error"], row["stage"])


# ---------------------------------------------------------------------------------------------
# Causes: the first error line with what differs from model to model blanked


def normalize(error, stage="export"):
    """The cause of a failure: the error line without file names, node names, numbers, shapes."""
    text = error
    unsupported = re.search(r"unsupported ONNX op types: (.*)", text)
    if unsupported:
        ops = re.findall(r"(?:^|, )([\w:.]+) \(first:", unsupported.group(1))
        return "unsupported op " + ", ".join(ops)
    text = re.sub(r"placer: error: (invalid model: )?", "", text)
    text = re.sub(r"\S+\.onnx: ", "", text)  # the file
    # A node's failure: keep its op type and what went wrong.
    node = re.match(r"node \d+ (?:'[^']*' )?\((\w+)\): (.*)", text)
    if node:
        text = f"{node.group(1)}: {node.group(2)}"
    if stage == "step" and text.startswith("mismatch:"):
        if "gradient norm" in text:
            return "step: a gradient's norm differs from PyTorch's"
        if "gradient differs" in text:
            return "step: a gradient differs from PyTorch's"
        if "loss" in text:
            return "step: the loss differs from PyTorch's"
        if "without a match" in text or "no counterpart" in text:
            return "step: a PyTorch parameter has no counterpart in the ONNX graph"
        text = text[len("mismatch:"):]
    text = re.sub(r"'[^']*'", "'…'", text)  # names
    text = re.sub(r"\[[^\]]*\]", "[…]", text)  # shapes and lists
    text = re.sub(r"-?\b\d+(\.\d+)?(e-?\d+)?\b(?!-D)", "N", text)  # numbers (not "2-D")
    text = re.sub(r"0x[0-9a-f]+", "N", text)
    return (f"{stage}: " if stage in ("step", "compare") else "") + text.strip()[:200]


# ---------------------------------------------------------------------------------------------
# The table and the summary


def read_rows(path):
    """The rows of results.csv; one an older version of this script wrote is rewritten with the
    columns of this one (the new ones empty), so that new rows can be appended to it."""
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        rows = [{c: row.get(c) or "" for c in COLUMNS} for row in reader]
        header = reader.fieldnames
    if header != COLUMNS:
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
    return rows


def md_cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def write_table(rows, path):
    shown = ["model", "library", "family", "params", "input", "exported", "loads", "step",
             "f32_vs_f64", "compare", "error"]
    with open(path, "w") as f:
        f.write("| " + " | ".join(shown) + " |\n|" + " --- |" * len(shown) + "\n")
        for row in sorted(rows, key=lambda r: (r["library"], r["model"])):
            f.write("| " + " | ".join(md_cell(row[c]) for c in shown) + " |\n")


def passed(row):
    return (row["exported"] == "yes" and row["loads"] == "yes" and row["step"] == "equal"
            and row["compare"] == "yes")


def seconds(row):
    return sum(float(row[k]) for k in ("export_s", "inspect_s", "step_s", "compare_s") if row[k])


def library_summary(library, rows):
    exported = [r for r in rows if r["exported"] == "yes"]

    def share(n):
        return f"{n} ({100 * n / len(exported):.0f}%)" if exported else str(n)

    times = [seconds(r) for r in rows]
    lines = [
        f"### {library}: {len(rows)} models",
        "",
        f"- not built at the shrunk size (PyTorch): {sum(r['exported'] == 'not built' for r in rows)}",
        f"- too large (skipped): {sum(r['exported'] == 'too large' for r in rows)}",
        f"- export failed (torch.onnx.export or PyTorch's own step): "
        f"{sum(r['exported'] == 'export failed' for r in rows)}",
        f"- exported: {len(exported)}; of those: load {share(sum(r['loads'] == 'yes' for r in exported))}, "
        f"step equal to PyTorch {share(sum(r['step'] == 'equal' for r in exported))} (of the "
        f"others, ill-conditioned at this size: "
        f"{sum(r['step'] == 'differs' and ill_conditioned(r) for r in exported)}), "
        f"compare ran {share(sum(r['compare'] == 'yes' for r in exported))}, "
        f"all three {share(sum(passed(r) for r in exported))}",
        f"- seconds per model: median {statistics.median(times):.1f}, mean "
        f"{statistics.mean(times):.1f}, max {max(times):.1f}" if times else "",
        "",
    ]
    return lines


def cause_table(title, rows):
    groups = {}
    for row in rows:
        groups.setdefault(row["cause"], []).append(row)
    lines = [f"### {title}", "", "| models | cause | examples | first example's error line |",
             "| ---: | --- | --- | --- |"]
    for cause, members in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        examples = ", ".join(f"`{r['model']}`" for r in members[:2])
        lines.append(f"| {len(members)} | {md_cell(cause)} | {examples} | "
                     f"{md_cell(members[0]['error'])} |")
    return lines + [""]


def missing_ops(rows):
    """Each unsupported op type with the models it blocks (a model may lack several)."""
    count = {}
    for row in rows:
        if row["cause"].startswith("unsupported op "):
            for op in row["cause"][len("unsupported op "):].split(", "):
                count.setdefault(op, []).append(row["model"])
    lines = ["### Unsupported op types, by models blocked", "", "| models | op | examples |",
             "| ---: | --- | --- |"]
    for op, models in sorted(count.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        lines.append(f"| {len(models)} | {op} | {', '.join(models[:3])} |")
    return lines + [""]


def write_summary(rows, path, command):
    for row in rows:  # what normalize() says now, for rows an older run wrote
        if row["stage"]:
            row["cause"] = cause_of(row)
    lines = ["# Model sweep", "", f"Command: `{command}`", ""]
    libraries = sorted({r["library"] for r in rows})
    for library in libraries:
        lines += library_summary(library, [r for r in rows if r["library"] == library])
    ours = [r for r in rows if r["exported"] == "yes" and not passed(r)]
    lines += cause_table("placer's failures by cause (the first failing stage)", ours)
    lines += missing_ops(ours)
    theirs = [r for r in rows if r["exported"] in ("export failed", "not built")]
    lines += cause_table("Not placer's: not built or export failed, by cause", theirs)
    with open(path, "w") as f:
        f.write("\n".join(lines))
