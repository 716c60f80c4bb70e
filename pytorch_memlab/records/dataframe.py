"""Records as a pandas DataFrame (pandas is optional)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from . import csv_file
from .document import all_columns
from .model import GROWTH, FunctionRecord

if TYPE_CHECKING:
    import pandas


def _pandas() -> Any:
    try:
        import pandas
    except ImportError as exc:
        raise ImportError("to_dataframe() needs pandas, which is not installed: "
                          "pip install pandas") from exc
    return pandas


def dataframe(records: Sequence[FunctionRecord]) -> "pandas.DataFrame":
    """One row per (function, device, source line), the CSV file's columns;
    figures are nullable integers."""
    pandas = _pandas()
    columns = all_columns([], records)
    rows = [csv_file.row_values(record, line, columns)
            for record in records for line in record.lines]
    frame = pandas.DataFrame(rows, columns=csv_file.header(columns))
    numeric = (["first_line", "lineno", "count", GROWTH] + columns
               + csv_file.call_header(columns) + csv_file.PEAK_HEADER + csv_file.START_HEADER)
    return frame.astype({name: "Int64" for name in numeric})
