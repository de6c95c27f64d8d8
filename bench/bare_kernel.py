"""The floor of any ipykernel subclass: a ``Kernel`` that answers every cell at once.

It publishes the ``execute_result`` "2" and replies, with nothing between ipykernel's message
path and the reply: what the round trip of any kernel built on ipykernel 7 cannot go below.
Started by the bench as ``python -m bench.bare_kernel -f {connection_file}``.
"""

from __future__ import annotations

from typing import Any

from ipykernel.kernelapp import IPKernelApp
from ipykernel.kernelbase import Kernel


class BareKernel(Kernel):  # type: ignore[misc]
    implementation = "bare-kernel"
    implementation_version = "0"
    language = "none"
    language_info = {"name": "none"}  # noqa: RUF012 - ipykernel reads the class attribute
    banner = "the floor of an ipykernel subclass"
    _execute_sleep = (
        0.0  # ipykernel's pause before each reply (see jutul_jkernel/jupyter/execution.py)
    )

    async def do_execute(
        self,
        code: str,
        silent: bool,
        store_history: bool = True,
        user_expressions: dict[str, Any] | None = None,
        allow_stdin: bool = False,
        **kwargs: Any,
    ) -> dict[str, Any]:
        content = {"data": {"text/plain": "2"}, "metadata": {}, "execution_count": 0}
        content["execution_count"] = self.execution_count
        self.send_response(self.iopub_socket, "execute_result", content)
        return {"status": "ok", "execution_count": self.execution_count, "payload": [],
                "user_expressions": {}}  # fmt: skip


if __name__ == "__main__":
    IPKernelApp.launch_instance(kernel_class=BareKernel)
