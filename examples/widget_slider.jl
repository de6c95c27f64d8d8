# A slider widget made from Julia with nothing but the kernel's comms (IJulia's CommManager
# names, standard library only). JupyterLab's ipywidgets frontend (the jupyterlab_widgets
# package where JupyterLab runs) draws it, and moving it updates `slider_value[]`.
#
#     include("examples/widget_slider.jl")   # in a notebook cell: the slider shows below it
#
# It is what a package builds widgets on:
# 1. a model: a comm to the "jupyter.widget" target whose data is the widget's state (widget
#    protocol 2: ipywidgets 8's model and view names, module versions 2.0.0);
# 2. a view: a value that shows as application/vnd.jupyter.widget-view+json, naming the model;
# 3. an observer: the comm's on_msg gets the frontend's {"method": "update", "state": ...}.
#
# A cell that runs can read the slider as it moves: JupyterLab 4.4 and newer send a widget's
# messages over a kernel subshell of their own (docs/subshells.md), and the kernel runs the
# comm's on_msg at once, beside the running cell. In the next cell, move the slider to 10:
#
#     while slider_value[] != 10   # the loop sees every move, and ends at 10
#         println("n = ", slider_value[]); sleep(0.5)
#     end
const CM = IJulia.CommManager

"""An ipywidgets model: its state, kept in step with the frontend's copy over its comm."""
struct Widget
    comm::CM.Comm
    state::Dict{String,Any}
end

function Widget(model::String, view::String, state::Dict{String,Any}; on_change = (k, v) -> nothing)
    state = merge(Dict{String,Any}(
        "_model_module" => "@jupyter-widgets/controls", "_model_module_version" => "2.0.0",
        "_model_name" => model,
        "_view_module" => "@jupyter-widgets/controls", "_view_module_version" => "2.0.0",
        "_view_name" => view), state)
    comm = CM.Comm("jupyter.widget"; data = Dict("state" => state, "buffer_paths" => []),
                   metadata = Dict("version" => "2.1.0"))
    widget = Widget(comm, state)
    comm.on_msg = function (msg)
        data = msg.content["data"]
        get(data, "method", "") == "update" || return   # e.g. "request_state": not kept here
        for (name, value) in data["state"]
            widget.state[name] = value
            on_change(name, value)
        end
    end
    return widget
end

# Jupyter shows a widget as a view of its model.
Base.show(io::IO, ::MIME"application/vnd.jupyter.widget-view+json", w::Widget) =
    print(io, "{\"model_id\": \"", w.comm.id, "\", \"version_major\": 2, \"version_minor\": 0}")
Base.show(io::IO, w::Widget) =
    print(io, w.state["_model_name"], "(value = ", repr(get(w.state, "value", nothing)), ")")

slider_value = Ref(5)
slider = Widget("IntSliderModel", "IntSliderView",
                Dict{String,Any}("value" => 5, "min" => 0, "max" => 10, "step" => 1,
                                 "description" => "n");
                on_change = (name, value) -> name == "value" && (slider_value[] = value))
