"""What the inference child refuses with: a model it will not serve, a request this model
cannot answer. Raised by `generate` and `media_models` (which `generate` uses), and answered
to the parent by the children (`child`, `speak_child`, `evaluate.child`)."""


class LoadRefused(Exception):
    """A model this child will not serve; the message says why and what to do."""


class GenerationInputError(Exception):
    """A request this model cannot answer; `field` names the request field at fault."""

    def __init__(self, field_name: str, message: str):
        self.field = field_name
        super().__init__(message)
