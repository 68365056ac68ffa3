"""The student of `hf-vanilla-transformer distill`: its sizes (a preset, then the sizes given), its configuration
(the teacher's, with those sizes: same architecture, vocabulary and positions, so that it keeps the teacher's
tokenizer), and its first weights: copied from the teacher's layers, or random.

`--init copy` is the shrink-and-fine-tune start of DistilBART (Shleifer and Rush, 2020): the embeddings and the output
projection, and from each stack evenly chosen layers, the first and the last among them (one decoder layer: the
first). It needs the teacher's widths; the depth may only shrink.
"""

import re
from dataclasses import dataclass

from ..errors import InputError
from ..model.configuration_vanilla_transformer import VanillaTransformerConfig
from ..model.modeling_vanilla_transformer import VanillaTransformerForConditionalGeneration
from ..recipes.common import expand_sizes, model_config_for


# What each student preset sets; `shallow` keeps the teacher's width and encoder and decodes with one layer (Kasai et
# al. 2021, "Deep Encoder, Shallow Decoder": decoding costs per target token, encoding per sentence). `tiny` and
# `base` are the Bergamot students' sizes (browsermt/students): 256 and 512 wide, 6 encoder and 2 decoder layers.
PRESETS = {
    "shallow": dict(decoder_layers=1),
    "tiny": dict(d_model=256, encoder_layers=6, decoder_layers=2, heads=8, ffn_dim=1536),
    "base": dict(d_model=512, encoder_layers=6, decoder_layers=2, heads=8, ffn_dim=2048),
}
INITS = ("copy", "random")
# The configuration's fields that the student's options set, for messages that name what the user typed.
OPTIONS = {
    "d_model": "--student_d_model",
    "encoder_layers": "--student_layers",
    "decoder_layers": "--student_layers",
    "encoder_attention_heads": "--student_heads",
    "decoder_attention_heads": "--student_heads",
    "encoder_ffn_dim": "--student_ffn_dim",
    "decoder_ffn_dim": "--student_ffn_dim",
    "dropout": "--student_dropout",
}


@dataclass(frozen=True)
class StudentSizes:
    d_model: int
    encoder_layers: int
    decoder_layers: int
    heads: int
    ffn_dim: int

    @classmethod
    def of(cls, teacher: VanillaTransformerConfig, preset: str, **given) -> "StudentSizes":
        """The preset's sizes with those `given` (not None) on top; what neither sets is the teacher's."""
        sizes = dict(
            d_model=teacher.d_model,
            encoder_layers=teacher.encoder_layers,
            decoder_layers=teacher.decoder_layers,
            heads=teacher.encoder_attention_heads,
            ffn_dim=teacher.encoder_ffn_dim,
        )
        sizes.update(PRESETS[preset])
        sizes.update({name: value for name, value in given.items() if value is not None})
        return cls(**sizes)


def parse_layers(value: str | None) -> tuple[int | None, int | None]:
    """--student_layers ENC,DEC (e.g. 6,2)."""
    if value is None:
        return None, None
    match = re.fullmatch(r"\s*(\d+)\s*,\s*(\d+)\s*", value)
    if not match or min(map(int, match.groups())) < 1:
        raise InputError(f"--student_layers {value}: expected ENCODER,DECODER layers, e.g. 6,2.")
    return int(match[1]), int(match[2])


def student_config(teacher: VanillaTransformerConfig, sizes: StudentSizes, dropout: float | None):
    """The teacher's configuration with the student's sizes (and `dropout` when given)."""
    fields = teacher.to_dict()
    for name in ("architectures", "auto_map", "transformers_version", "model_type", "custom_pipelines"):
        fields.pop(name, None)
    layers = (sizes.encoder_layers, sizes.decoder_layers)
    fields.update(expand_sizes(sizes.d_model, layers, sizes.heads, sizes.ffn_dim))
    if dropout is not None:
        fields["dropout"] = dropout
    return model_config_for("vanilla", OPTIONS, **fields)


def layers_to_copy(student_layers: int, teacher_layers: int) -> list[int]:
    """Evenly spaced teacher layers for a stack of `student_layers`, the first and the last among them."""
    if student_layers == 1:
        return [0]
    return [round(i * (teacher_layers - 1) / (student_layers - 1)) for i in range(student_layers)]


def check_copy(student: VanillaTransformerConfig, teacher: VanillaTransformerConfig) -> None:
    """Refuse, naming the option, a student that the teacher's layers cannot be copied into."""
    widths = [
        ("--student_d_model", student.d_model, teacher.d_model),
        ("--student_ffn_dim", student.encoder_ffn_dim, teacher.encoder_ffn_dim),
        ("--student_heads", student.encoder_attention_heads, teacher.encoder_attention_heads),
    ]
    for option, own, teachers in widths:
        if own != teachers:
            raise InputError(
                f"--init copy: the student's {option[10:]} {own} is not the teacher's {teachers}; layers copy only at "
                f"the teacher's widths: give {option} {teachers}, or --init random."
            )
    for stack in ("encoder", "decoder"):
        own, teachers = getattr(student, f"{stack}_layers"), getattr(teacher, f"{stack}_layers")
        if own > teachers:
            raise InputError(
                f"--init copy: the student's {own} {stack} layers are more than the teacher's {teachers}: "
                "--student_layers at most the teacher's, or --init random."
            )


def build_student(config, teacher=None) -> tuple[VanillaTransformerForConditionalGeneration, dict]:
    """The student, with the teacher's layers copied where `teacher` is given (`check_copy` first), and which teacher
    layer each of its layers starts from."""
    student = VanillaTransformerForConditionalGeneration(config)
    if teacher is None:
        return student, {}
    check_copy(config, teacher.config)
    picks = {
        stack: layers_to_copy(getattr(config, f"{stack}_layers"), getattr(teacher.config, f"{stack}_layers"))
        for stack in ("encoder", "decoder")
    }
    teachers = teacher.state_dict()

    def source(name: str) -> str:
        return re.sub(
            r"^model\.(encoder|decoder)\.layers\.(\d+)\.",
            lambda m: f"model.{m[1]}.layers.{picks[m[1]][int(m[2])]}.",
            name,
        )

    student.load_state_dict({name: teachers[source(name)] for name in student.state_dict()})
    return student, picks
