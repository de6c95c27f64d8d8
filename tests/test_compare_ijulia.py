"""What the output-by-output comparison with IJulia (bench/compare_ijulia.py) counts as the same.

The tool itself runs the real IJulia, which few machines have; its normalising is checked here
on outputs as the two kernels print them.
"""

from __future__ import annotations

import pytest

from bench.compare_ijulia import normalise


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        # `] st` names the default environment, in each kernel's first depot: IJulia's own
        # depot against the user's (or the real packages' depot the tool gives this kernel).
        (
            "Status `/opt/julia-packages-depot/environments/v1.10/Project.toml` (empty project)",
            "Status `/opt/ijulia-1.34.4/depot/environments/v1.10/Project.toml` (empty project)",
        ),
        (
            "  No Changes to `~/.julia/environments/v1.12/Manifest.toml`",
            "  No Changes to `/opt/ijulia-1.34.4/depot/environments/v1.12/Manifest.toml`",
        ),
        ("  0.000123 seconds (3 allocations: 48 bytes)", "  0.2 seconds (5 allocations: 96 bytes)"),
        ("Ptr{Nothing} @0x00007f3a2c001230", "Ptr{Nothing} @0x00007f11aa00beef"),
    ],
)
def test_what_must_differ_is_the_same_once_normalised(ours: str, theirs: str) -> None:
    assert normalise(ours) == normalise(theirs)


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        # Another environment (a project of its own) is a difference, not a depot's.
        (
            "Status `~/.julia/environments/v1.10/Project.toml` (empty project)",
            "Status `~/work/Project.toml` (empty project)",
        ),
        (
            "Status `~/.julia/environments/v1.10/Project.toml`",
            "Status `~/.julia/environments/v1.12/Project.toml`",
        ),
        ("x = 42", "x = 43"),
    ],
)
def test_what_a_user_would_see_differ_still_differs(ours: str, theirs: str) -> None:
    assert normalise(ours) != normalise(theirs)
