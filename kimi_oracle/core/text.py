"""Text that came from data (candidate messages, paths, file names) made inert for every output.

Nothing a candidate prints or raises may break a report: no markup is interpreted, text that is
not valid Unicode (lone surrogates from undecodable bytes) is escaped rather than fatal, and XML
gets only the characters XML 1.0 allows.
"""

from __future__ import annotations

import re
from typing import Any

# Characters XML 1.0 forbids even as references: C0 controls but tab, LF, CR; surrogates; U+FFFE/F.
_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def safe_text(value: Any) -> str:
    """`str(value)` with anything that cannot be encoded as UTF-8 escaped (`\\udcff`), never fatal."""
    text = value if isinstance(value, str) else str(value)
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def xml_text(value: Any) -> str:
    """`safe_text` with the characters XML 1.0 cannot hold written as `\\xNN` escapes."""
    return _XML_INVALID.sub(lambda m: f"\\x{ord(m.group(0)):02x}", safe_text(value))


def rich_text(value: Any) -> Any:
    """A rich `Text` holding `value` literally: brackets stay brackets, no markup is parsed."""
    from rich.text import Text

    return Text(safe_text(value))
