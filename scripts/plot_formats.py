"""The --formats option of the plot scripts (plot_run.py, plot_attention.py): the image formats to write.

    --formats png,svg    comma-separated matplotlib formats; each figure is written once per format

Checked before anything is read or written: an empty list, an empty entry ("png,,svg") or a format that
matplotlib cannot write is one error naming the formats it can.
"""


class FormatsError(ValueError):
    pass


def add_formats_argument(parser, default):
    parser.add_argument("--formats", default=default,
                        help=f"comma-separated image formats, e.g. png,svg,pdf (default {default})")


def parse_formats(text):
    """[format, ...] of a --formats value, in the order given, each once; FormatsError names the problem."""
    from matplotlib.backend_bases import FigureCanvasBase
    known = FigureCanvasBase.get_supported_filetypes()
    names = [x.strip().lower() for x in str(text).split(",")]
    if not any(names) or not all(names):
        raise FormatsError(f"--formats {text!r} has an empty entry; give comma-separated formats such as png,svg")
    unknown = [x for x in names if x not in known]
    if unknown:
        raise FormatsError(f"--formats: {', '.join(unknown)} is not an image format matplotlib writes; "
                           f"give some of {', '.join(sorted(known))}")
    return list(dict.fromkeys(names))
