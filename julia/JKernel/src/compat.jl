# compat.jl: the code that differs by Julia version. Each branch is gated on what exists
# (`isdefined`), never on VERSION, and names the upstream file and branch it was written
# against: Julia 1.5.3 is the only one that runs here, users run 1.10 to master.
# (capture.jl keeps its own stdio gates; server.jl and launcher.jl, which run before this
# package is loaded, keep theirs.)

# This module is I/O glue: LLVM optimisation buys nothing and costs start-up time.
# (`Base.Experimental.@optlevel`, base/experimental.jl in 1.5.3 and master.)
@static if isdefined(Base.Experimental, Symbol("@optlevel"))
    Base.Experimental.@optlevel 0
end

# ---- the session: isinteractive(), the REPL backend's AST transforms ----

"""
    interactive_session(f)

Run `f`, the server, with `isinteractive()` true, as at the REPL and in IJulia: packages and
Base take their interactive branch (Pkg's `]` mode warns "intended for interactive use only"
otherwise; loading announces "Precompiling X" at Info level, not Debug). `isinteractive()`
reads the global `Base.is_interactive` (base/initdefs.jl: `is_interactive = false` in 1.5.3 and
release-1.10, `is_interactive::Bool = false` with `isinteractive() = is_interactive` in
release-1.12 and master). IJulia's kernel set it the same way (JuliaLang/IJulia.jl
src/kernel.jl: `Core.eval(Base, :(is_interactive = true))`, "workaround JuliaLang/julia#6765")
until commit de99a14 (2025-05) dropped it, its kernelspec passing `-i`. We do not pass `-i`:
it also turns the script's end into a REPL on stdin (below) and can print a banner.

The flag is put back when `f` returns or throws. With it set, Julia does not `exit(1)` after a
script error, and runs its REPL on stdin once the script is over (base/client.jl
`exec_options` in 1.5.3 and release-1.10; `_start` calling `repl_main` in release-1.12 and
master): a server that failed to start would wait in a REPL and end with status 0. (`serve`
ends the process itself with `exit`, which runs no `finally`.)
"""
function interactive_session(f)
    isdefined(Base, :is_interactive) || return f()
    was = isinteractive()
    set_interactive!(true)
    try
        return f()
    finally
        set_interactive!(was)
    end
end

set_interactive!(flag::Bool) = Core.eval(Base, :(is_interactive = $flag))

"""
    default_ast_transforms(softscope) -> Vector{Any}

The AST transforms a new REPL backend starts with, which cells get too: a copy of
`REPL.repl_ast_transforms` ("defaults for new REPL backends"; the REPLBackend constructor
copies it, stdlib/REPL/src/REPL.jl). That is `Any[softscope]` in 1.5.3 and release-1.10, and
`Any[softscope, warn_on_non_owning_accesses]` in release-1.12 and master (the "X is defined
in M and is not public in N" warning, 1.12 NEWS, #54872). `softscope = false`
(JUTUL_JKERNEL_SOFTSCOPE=no) leaves out only `REPL.softscope`.
"""
function default_ast_transforms(softscope::Bool)
    transforms = isdefined(REPL, :repl_ast_transforms) ?
        copy(REPL.repl_ast_transforms) : Any[REPL.softscope]
    softscope || filter!(f -> f !== REPL.softscope, transforms)
    return transforms
end

# ---- parsing, ans and err, the startup file ----

"""Parse a cell as the REPL parses a line (base/client.jl `parse_input_line`, 1.5.3 to master)."""
function parse_cell(code::String, filename::String)
    @static if isdefined(Base, :parse_input_line)
        return Base.parse_input_line(code; filename = filename)
    else
        return Meta.parseall(code; filename = filename)
    end
end

"""
    syntax_status(code) -> "complete", "incomplete", "invalid", or nothing

is_complete's answer for `code` read from JuliaSyntax's parse stream, as its parser hook
decides it for `parse_cell` (base/JuliaSyntax/src/hooks.jl, `core_parser_hook`, release-1.10
and release-1.12; master's JuliaSyntax/src/integration/hooks.jl the same): a stream with an
error becomes an `:incomplete` Expr when `_incomplete_tag` names what is left open (looked
for up to the last byte that is not whitespace or a comment where the stream can say,
`last_non_whitespace_byte`, release-1.12 and master; else the code's last byte, release-1.10),
and an `:error` otherwise. Asked through the hook on 1.10, that error path ran methods the
system image holds inferred but not compiled (`_has_nested_error` and what it reaches, the
`findfirst`, `resize!` and `any` of the top-level truncation), 0.1-0.3 s of the first
is_complete of unfinished code in every session; these calls are all compiled in the image
(as IJulia's `Meta.parse` path is), and give the status without building the error message.
`nothing` where the parser is not JuliaSyntax's hook (1.5: flisp; `JULIA_USE_FLISP_PARSER=1`;
a parser of the user's) or one of these is missing: the caller then parses with `parse_cell`.
"""
function syntax_status(code::String)
    isdefined(Base, :JuliaSyntax) && isdefined(Core, :_parse) || return nothing
    syntax = getfield(Base, :JuliaSyntax)
    for name in (:core_parser_hook, :ParseStream, :parse!, :any_error, :build_tree, :SyntaxNode,
                 :_incomplete_tag)
        isdefined(syntax, name) || return nothing
    end
    runs_hook(getfield(Core, :_parse), syntax.core_parser_hook, syntax) || return nothing
    stream = syntax.ParseStream(code, 1)
    syntax.parse!(stream; rule = :all)
    syntax.any_error(stream) || return "complete"
    codelen = isdefined(syntax, :last_non_whitespace_byte) ?
        Int(syntax.last_non_whitespace_byte(stream)) : lastindex(code)
    tree = syntax.build_tree(syntax.SyntaxNode, stream; first_line = 1, filename = "cell")
    return syntax._incomplete_tag(tree, codelen) === :none ? "invalid" : "incomplete"
end

"""
Whether `parser` (`Core._parse`) runs JuliaSyntax's `hook`: the hook itself, or the closure
Base installs at start-up (`enable_in_core!` -> `fix_world_age(core_parser_hook, world)`, a
closure of JuliaSyntax's over the closure of its keyword arguments, which captures the hook).
"""
function runs_hook(parser, hook, syntax::Module)
    parser === hook && return true
    parentmodule(typeof(parser)) === syntax || return false
    for i in 1:nfields(parser)
        inner = getfield(parser, i)
        inner === hook && return true
        inner isa Function && parentmodule(typeof(inner)) === syntax &&
            any(j -> getfield(inner, j) === hook, 1:nfields(inner)) && return true
    end
    return false
end

"""Julia 1.9 and newer keep `err` in `Base.MainInclude`, which Main uses."""
main_include_has(name::Symbol) = isdefined(Base, :MainInclude) && isdefined(Base.MainInclude, name)

"""
    set_main_global!(name, value)

Set `ans` or `err` where the user's REPL keeps them. Julia 1.9 and newer keep both in
`Base.MainInclude` and set them with `setglobal!(Base.MainInclude, :ans, value)` (base/client.jl
and stdlib/REPL/src/REPL.jl, release-1.10, release-1.12 and master); 1.5-1.8 set `Main.ans`
directly (1.5.3 base/client.jl, `jl_set_global`), and have no `err`, which then lives in
`MainNames`, beside `In` and `Out`, so it never overwrites a user's own `err`.
"""
function set_main_global!(name::Symbol, @nospecialize(value))   # one method for every value
    if main_include_has(name)
        if isdefined(Core, :setglobal!)
            getfield(Core, :setglobal!)(Base.MainInclude, name, value)
        else
            Core.eval(Base.MainInclude, Expr(:global, Expr(:(=), name, QuoteNode(value))))
        end
    elseif name === :ans
        ccall(:jl_set_global, Cvoid, (Any, Any, Any), Main, :ans, value)
    else
        Core.eval(MainNames, Expr(:global, Expr(:(=), name, QuoteNode(value))))
    end
    nothing
end

"""`err` is what the REPL keeps of the last error: its exception stack (Julia 1.7 and newer,
`current_exceptions`), or the exception itself on older Julia."""
function set_err!(@nospecialize(e))
    # Not specialized on the exception's type: one compiled method (precompile.jl) serves
    # every error, where each new type compiled its own on the first error of the session.
    value = isdefined(Base, :current_exceptions) ?
        Base.invokelatest(getfield(Base, :current_exceptions)) : e
    set_main_global!(:err, value)
end

"""
Include the startup files as the REPL does: `Base.load_julia_startup` includes the
system-wide and the user's file unconditionally (base/client.jl in 1.5.3, release-1.10,
release-1.12 and master); it is internal, hence the fallback to the user's file alone.
"""
function load_startup_files()
    if isdefined(Base, :load_julia_startup)
        Base.load_julia_startup()
    elseif !isempty(DEPOT_PATH)
        path = abspath(DEPOT_PATH[1], "config", "startup.jl")
        isfile(path) && Base.include(Main, path)
    end
    nothing
end

# ---- REPL modes: `]` and `;` ----

const PKG_ID = Base.PkgId(Base.UUID("44cfe95a-1eb2-52ea-b672-e2afdf69b78f"), "Pkg")

"""
    load_pkg() -> Module

Pkg, as the REPL's `]` loads it. Julia 1.11 and newer load it as a stdlib, from Julia's own
depot whatever the active project says (`Base.require_stdlib`, base/loading.jl in
release-1.12 and master; the REPL's `load_pkg()` in stdlib/REPL/src/Pkg_beforeload.jl calls
it); before that, through the load path (`Base.require`).
"""
load_pkg() = isdefined(Base, :require_stdlib) ?
    getfield(Base, :require_stdlib)(PKG_ID) : Base.require(PKG_ID)

"""
    pkg_command(pkg, cmd)

Run one `]` command with Pkg's REPL mode. Called through `invokelatest`: Pkg may have been
loaded after this task's world began, and on 1.12+ reading its bindings from an older world
is an error in waiting (see server.jl). `pkgstr` is what `pkg"..."` calls (Pkg release-1.5
to master, src/REPLMode/REPLMode.jl); `do_cmds` is the fallback of newer Pkg.
"""
function pkg_command(pkg::Module, cmd::String)
    mode = pkg.REPLMode
    isdefined(mode, :pkgstr) ? mode.pkgstr(cmd) : mode.do_cmds(cmd, stdout)
    nothing
end

"""
Run `cmd` through \$JULIA_SHELL / \$SHELL like the REPL's `;` (base/client.jl `repl_cmd`;
`Base.shell_escape_posixly` is in base/shell.jl of 1.5.3, release-1.10, release-1.12 and master).
"""
function through_user_shell(cmd::Cmd)
    (Sys.iswindows() || !isdefined(Base, :shell_escape_posixly)) && return cmd
    shell = Base.shell_split(get(ENV, "JULIA_SHELL", get(ENV, "SHELL", "/bin/sh")))
    return `$shell -c $("(" * Base.shell_escape_posixly(cmd) * ") && true")`
end

# ---- queries ----

"""
    completion_string(c, completions_module=REPL.REPLCompletions)

The text a completion inserts. Julia 1.12 and newer have no `completion_text` method for
LaTeX and emoji completions (`\\alpha`): `BslashCompletion` only has `named_completion`
(stdlib/REPL/src/REPLCompletions.jl, release-1.12 and master:
`named_completion(c::BslashCompletion) = NamedCompletion(c.completion, c.name)`; release-1.10
has only `completion_text`; IJulia src/handlers.jl makes the same choice).
"""
completion_string(c, completions_module::Module = REPL.REPLCompletions) =
    isdefined(completions_module, :named_completion) ?
        completions_module.named_completion(c).completion::String :
        completions_module.completion_text(c)::String

"""
    documentation_found(md) -> Bool

Whether help found documentation: its text does not start with "No documentation found".
Julia 1.11 and newer put a warning first when the name is not public ("The following
bindings may be internal; ...": `insert_internal_warning` in stdlib/REPL/src/docview.jl,
release-1.12 and master, does `pushfirst!(md.content, admonition)`), so leading admonitions
are looked past. 1.5.3 and release-1.10 prepend nothing.
"""
function documentation_found(md)
    Markdown = REPL.Markdown   # docview.jl's `using Markdown` (1.5.3 to master)
    if md isa Markdown.MD && !isempty(md.content) && first(md.content) isa Markdown.Admonition
        rest = findfirst(x -> !(x isa Markdown.Admonition), md.content)
        rest === nothing && return true
        md = Markdown.MD(md.content[rest:end])
    end
    plain = sprint(show, MIME("text/plain"), md; context = :color => false)
    return !startswith(lstrip(plain), "No documentation found")
end

# ---- the evaluation a task belongs to (subshells: beside.jl) ----
#
# A beside evaluation's output, displays and comm messages are told apart from the main cell's
# by task, not by time: every task it runs in, and every task those start (`@async`,
# `Threads.@spawn`, `Task()`), must find its EvalCtx. task_local_storage is not inherited (on
# 1.5.3 an `@async` child sees `nothing`); what is:
# - Julia 1.11 and newer: a ScopedValue. A new task takes its parent's scope (src/task.c,
#   `jl_new_task`: `t->scope = ct->scope`, release-1.12 and master; base/scopedvalues.jl).
# - Julia 1.5 to 1.10: the task's logger, `Task.logstate`, which `jl_new_task` copies from the
#   parent (`t->logstate = ct->logstate`, src/task.c in 1.5.3 and release-1.10). The context
#   rides in a logger that hands every call on to the global logger; user code in a subshell
#   sees it as `current_logger()`, and its own `with_logger` block drops the route for the
#   block (its output then goes to the main cell).
# - Neither: task_local_storage, so a beside evaluation's child tasks print into the main cell.

@static if isdefined(Base, :ScopedValues)
    const EVAL_CTX = Base.ScopedValues.ScopedValue{Any}(nothing)
    """The beside evaluation the running task belongs to, or `nothing` (the main one's)."""
    current_ctx() = EVAL_CTX[]::Union{Nothing,EvalCtx}
    """Run `f` as part of beside evaluation `c`, and so every task `f` starts."""
    with_ctx(f, c::EvalCtx) = Base.ScopedValues.with(f, EVAL_CTX => c)
elseif hasfield(Task, :logstate)
    """The global logger, carrying the beside evaluation a task belongs to (see above)."""
    struct RouteLogger <: Logging.AbstractLogger
        ctx::EvalCtx
    end
    Logging.min_enabled_level(::RouteLogger) = Logging.min_enabled_level(global_logger())
    Logging.shouldlog(::RouteLogger, args...) = Logging.shouldlog(global_logger(), args...)
    Logging.handle_message(::RouteLogger, args...; kwargs...) =
        Logging.handle_message(global_logger(), args...; kwargs...)
    Logging.catch_exceptions(::RouteLogger) = Logging.catch_exceptions(global_logger())
    function current_ctx()
        state = current_task().logstate
        state === nothing && return nothing
        logger = state.logger
        return logger isa RouteLogger ? logger.ctx : nothing
    end
    with_ctx(f, c::EvalCtx) = Logging.with_logger(f, RouteLogger(c))
else
    current_ctx() = get(task_local_storage(), :jkernel_eval_ctx, nothing)::Union{Nothing,EvalCtx}
    with_ctx(f, c::EvalCtx) = task_local_storage(f, :jkernel_eval_ctx, c)
end

"""The beside evaluation whose output this is, or `nothing`; one load until a subshell ran."""
output_ctx() = SHELLS_USED[] ? current_ctx() : nothing
