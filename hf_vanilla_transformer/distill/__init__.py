"""Sequence-level knowledge distillation (`hf-vanilla-transformer distill`): from a trained teacher to a small student
shipped as CTranslate2 int8, measured against its teacher. `pipeline` lists the steps; each kind of data has its
module: the corpus and the selection (`corpus`), the student (`student`), the step records (`records`), the report
(`report`)."""
