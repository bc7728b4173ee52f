"""Block sizes and dynamic shared memory as the launchers set them: launch_probe's lines (see
launch_probe.cu) -> {kernel short name: [Launch]}."""
from dataclasses import dataclass


@dataclass
class Launch:
    threads: int
    dynamic_smem: int
    shape: str  # the model shape the numbers hold for, '-' when they hold for any


def parse_probe(text: str) -> dict:
    out = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        name, threads, smem, shape = line.split("\t")
        out.setdefault(name, []).append(Launch(int(threads), int(smem), shape))
    return out
