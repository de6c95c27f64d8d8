"""Base's prompts and IJulia's readprompt ask through Jupyter's stdin channel.

``Base.getpass(message)`` and ``Base.prompt(message; default)`` call their three-argument
methods on ``stdin`` "to allow new methods to be defined if stdin has been redirected to some
custom stream, e.g. in IJulia" (JuliaLang/julia base/util.jl, release-1.10 to master); Base's
own ``getpass`` takes a terminal only. LibGit2 asks for credentials with exactly these two
calls. Through jupyter_client on the installed kernel: each cell sends ``input_request``\\ s,
the test answers them with ``input_reply`` as a frontend does, and reads the result.
"""

from __future__ import annotations

from typing import Any

import pytest
from jupyter_client.blocking.client import BlockingKernelClient

from .clients import REPLY_TIMEOUT, collect, drain, execute, result_of, text_of
from .conftest import Kernel

pytestmark = pytest.mark.e2e


def answered(
    kc: BlockingKernelClient, code: str, answers: list[str]
) -> tuple[list[dict[str, Any]], dict[str, Any], list[dict[str, Any]]]:
    """Run `code`, answering its input requests in turn; return the requests' contents, the
    reply's content and the cell's outputs."""
    drain(kc)
    msg_id = kc.execute(code, allow_stdin=True)
    requests = []
    for answer in answers:
        request = kc.get_stdin_msg(timeout=REPLY_TIMEOUT)
        assert request["msg_type"] == "input_request", request
        assert request["parent_header"]["msg_id"] == msg_id
        requests.append(request["content"])
        kc.input(answer)
    reply, outputs = collect(kc, msg_id)
    return requests, reply["content"], outputs


def test_getpass_is_answered_through_input_reply(kernel: Kernel) -> None:
    """`Base.getpass` asks with `password=True` (the frontend hides the typing) and returns a
    SecretBuffer at its start, as Base's terminal method does; nothing of it is printed."""
    _, kc = kernel
    requests, reply, outputs = answered(
        kc, 'pw = Base.getpass("Token"); (typeof(pw), read(pw, String))', ["s3cr3t ü"]
    )
    assert requests == [{"prompt": "Token: ", "password": True}]
    assert reply["status"] == "ok", reply
    assert result_of(outputs) == '(Base.SecretBuffer, "s3cr3t ü")'
    assert "s3cr3t" not in text_of(outputs) + text_of(outputs, "stderr")


def test_getpass_without_suffix(kernel: Kernel) -> None:
    """Julia 1.12+'s `with_suffix=false` shows the message as it is."""
    _, kc = kernel
    requests, reply, outputs = answered(
        kc, 'read(Base.getpass(stdin, stdout, "Key> "; with_suffix = false), String)', ["k"]
    )
    assert requests == [{"prompt": "Key> ", "password": True}]
    assert result_of(outputs) == '"k"', reply


def test_prompt_takes_its_default_for_an_empty_answer(kernel: Kernel) -> None:
    """`Base.prompt` shows Base's "message [default]: " as the input prompt, not on stdout."""
    _, kc = kernel
    code = (
        '(Base.prompt("Colour"; default = "teal"), Base.prompt("Size"), '
        'Base.prompt("Shape"; default = "round"))'
    )
    requests, reply, outputs = answered(kc, code, ["", "XL", "square"])
    assert requests == [
        {"prompt": "Colour [teal]: ", "password": False},
        {"prompt": "Size: ", "password": False},
        {"prompt": "Shape [round]: ", "password": False},
    ]
    assert result_of(outputs) == '("teal", "XL", "square")', reply
    assert text_of(outputs) == ""


# LibGit2 (stdlib/LibGit2/src/callbacks.jl, `authenticate_userpass`, Julia release-1.10,
# release-1.12 and master): the calls it makes for an https credential, as it makes them.
LIBGIT2_USERPASS = r"""
let url = "https://github.com", username = "ada"
    response = Base.prompt("Username for '$url'", default=username)
    response === nothing && error("user_abort")
    user = response
    url = "https://$user@github.com"
    response = Base.getpass("Password for '$url'")
    response === nothing && error("user_abort")
    isempty(response) && error("user_abort")
    (user, read(response, String))
end
"""


def test_libgit2_credential_prompts(kernel: Kernel) -> None:
    """A username with its default taken, then a hidden password."""
    _, kc = kernel
    requests, reply, outputs = answered(kc, LIBGIT2_USERPASS, ["", "hunter2"])
    assert requests == [
        {"prompt": "Username for 'https://github.com' [ada]: ", "password": False},
        {"prompt": "Password for 'https://ada@github.com': ", "password": True},
    ]
    assert result_of(outputs) == '("ada", "hunter2")', reply


def test_readprompt_and_readline(kernel: Kernel) -> None:
    """`IJulia.readprompt` shows its prompt as given and hides the typing with password=true;
    `readline(stdin)` asks with an empty prompt."""
    _, kc = kernel
    code = (
        'a = IJulia.readprompt("Name? "); b = IJulia.readprompt("PIN? "; password = true); '
        "c = readline(stdin); (a, b, c)"
    )
    requests, reply, outputs = answered(kc, code, ["Ada", "1234", "line"])
    assert requests == [
        {"prompt": "Name? ", "password": False},
        {"prompt": "PIN? ", "password": True},
        {"prompt": "", "password": False},
    ]
    assert result_of(outputs) == '("Ada", "1234", "line")', reply


@pytest.mark.parametrize(
    ("call", "named"),
    [
        ('Base.getpass("Token")', 'Base.getpass("Token")'),
        ('Base.prompt("Colour"; default = "teal")', 'Base.prompt("Colour")'),
        ('IJulia.readprompt("Name? ")', "IJulia.readprompt"),
        ("readline(stdin)", "readline(stdin)"),
    ],
)
def test_without_allow_stdin_the_error_names_the_call(
    kernel: Kernel, call: str, named: str
) -> None:
    """A frontend that takes no input (allow_stdin=false: nbconvert, papermill) gets an error
    saying which call wanted a line and why there is none, not a hang or a MethodError."""
    _, kc = kernel
    reply, _ = execute(kc, call, allow_stdin=False)
    content = reply["content"]
    assert content["status"] == "error", content
    assert content["ename"] == "ErrorException", content
    assert content["evalue"] == (
        f"{named} needs a line from the frontend, but stdin is not available: "
        "this frontend does not take input"
    )
