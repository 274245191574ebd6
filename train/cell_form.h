/* cell_form.h: the compiled cell form (cell_form.c), the record of the cell a checkpoint was
 * trained with. `cellc train` stores it in a checkpoint (metadata "cell_program") and, loading one,
 * compares it with the form of this run's cell: a cell whose source changed in comments, layout or
 * spelling only loads; one whose formulas, options, params or states changed is refused unless
 * --allow-changed-cell. The form, not the source text, is compared because the text changes where
 * the cell does not (comments, layout, the names of `let`s), and the same text makes another cell
 * under other options or a changed import.
 *
 * The form is drawn from the checked graph (options bound, `let`s expanded, dims symbolic:
 * model.hidden and the like are the tensor shapes' to check), before lowering, so that what later
 * passes derive from it (lowering, simplification, the back end) may change between versions of
 * cellc without disowning a checkpoint. One line per definition, "LAYER\tKEY\tVALUE\tSHOWN" (LAYER
 * -1 for the whole model): VALUE is what is compared (a formula as a hash of its expression tree),
 * SHOWN what a message prints. A change to what VALUE holds is a new version of the form (its first
 * line). A param's initializer is not part of it: the checkpoint's values replace what it draws. */
#ifndef CELLC_CELL_FORM_H
#define CELLC_CELL_FORM_H

#include "pipeline.h"

typedef struct CellFormLine {
  int layer;   /* -1: the whole model */
  char *key;   /* "option see_h", "param Wzx", "state h", "gate z", "update h", "output", "input", "cell" */
  char *value, *shown;
} CellFormLine;

/* The lines in order, each string malloc'd; {0} is the empty form. */
typedef struct CellForm {
  CellFormLine *v;
  int n, cap;
} CellForm;

/* The model's line: the name of its cell. */
void cell_form_add_name(CellForm *f, const char *name);
/* Layer k's definitions, in the order the cell declares them: options, input, params, states,
 * gates, the states' updates, the output. */
void cell_form_add_layer(CellForm *f, int k, const Cell *c);
void cell_form_free(CellForm *f);

/* The form as the checkpoint's metadata holds it (malloc'd). */
char *cell_form_write(const CellForm *f);
/* Reads cell_form_write's text back into f (empty): 0, or -1 with f empty when it is not this
 * version's form, or not one at all. */
int cell_form_read(const char *text, CellForm *f);

/* The first difference between the checkpoint's form and this run's, as a sentence (malloc'd),
 * with how many lines differ in *count; NULL when none does. Layers only one side has are the
 * tensors' to report. */
char *cell_form_diff(const CellForm *was, const CellForm *now, int *count);

#endif
