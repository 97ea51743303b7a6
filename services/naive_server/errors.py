"""The naive server's errors: answered in OpenAI's error shape, or raised by ``generate``."""

from __future__ import annotations

from fastapi.responses import JSONResponse

from services.openai_protocol import error_body


class OpenAIError(Exception):
    """An error answered as ``{"error": {message, type, param, code}}`` with a status."""

    def __init__(
        self,
        status_code: int,
        message: str,
        *,
        error_type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.error_type = error_type
        self.param = param
        self.code = code

    def to_response(self) -> JSONResponse:
        """The JSON response for this error."""
        return JSONResponse(
            status_code=self.status_code,
            content=error_body(self.message, error_type=self.error_type, param=self.param, code=self.code),
        )


class GenerationFailed(RuntimeError):
    """``generate`` raised in the worker thread."""


ERROR_TYPE_BY_STATUS = {
    400: "invalid_request_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    503: "service_unavailable",
}
