"""A :class:`LaunchReport` as text that is itself a shell script: comments, heredocs for files, commands."""

from __future__ import annotations

import json

from rankscope.launch.plan import LaunchFile, LaunchReport, Recipe

#: How to keep every rank's collectives for `rankscope fr` (docs/fr.md); a comment, changing no command.
FR_NOTE = (
    "# collective desync: export TORCH_FR_BUFFER_SIZE=2000 TORCH_FR_DUMP_TEMP_FILE=$PWD/fr/rank_ before launching "
    "(torch < 2.5: TORCH_NCCL_TRACE_BUFFER_SIZE, TORCH_NCCL_DEBUG_INFO_TEMP_FILE); rankscope fr fr/ reads the dumps"
)


def _heredoc(file: LaunchFile) -> list[str]:
    # A quoted delimiter: the shell writes the text as it is ($SLURM_PROCID stays for the job to read).
    delimiter = "EOF"
    # split("\n"), not splitlines(): that also breaks at \x85, \u2028 ... which a shell keeps inside a word.
    lines = file.text.removesuffix("\n").split("\n")
    while delimiter in lines:
        delimiter += "_"
    return [f"cat > {file.name} <<'{delimiter}'", *lines, delimiter]


def render_recipe(recipe: Recipe) -> list[str]:
    out = [f"# --- {recipe.launcher} ---"]
    if recipe.prefix_note:
        out.append(f"# lines: {recipe.prefix_note}")
    out += [f"# note: {note}" for note in recipe.notes]
    for file in recipe.files:
        out += _heredoc(file)
    many = len(recipe.commands) > 1
    for command in recipe.commands:
        if many or command.where:
            out.append(f"# on {command.where}:")
        out.append(command.command)
    return out


def render_report(report: LaunchReport) -> str:
    plan = report.plan
    lines = [
        # json.dumps: a newline in a script name must not end the comment and become a command.
        f"# rankscope launch: {json.dumps(plan.script)} on {plan.nodes} node(s) x {plan.gpus} process(es), "
        f"world size {plan.world_size}, rendezvous {plan.rendezvous_host}:{plan.port}",
        FR_NOTE,
    ]
    for recipe in report.recipes:
        lines.append("")
        lines += render_recipe(recipe)
    return "\n".join(lines) + "\n"
