"""Word lists shared by the FTS query builder and the collection router (pure data).

Both work on the notes' three languages (Czech, Russian, English) without a real stemmer or
tokenizer model, so both need the same two crude tools: a stem length and a stop word list.
"""

from __future__ import annotations

# Czech, Russian and English inflect the ends of words: "zálohy"/"zálohování", "рецепт"/
# "рецепты", "backup"/"backups" share their first 5 letters, so 5 letters are a crude stem.
STEM_CHARS = 5

# Function words of the three languages: dropped from a query when it has other terms, so
# "how do I" neither dilutes BM25 nor expands into every word starting with "ho". The FTS
# ranking was measured with exactly this list (bench/beir.py): extend it only with a new
# measurement.
STOPWORDS = frozenset(
    """
    a an and are as at be by can do does for from has have how i if in into is it its me my no not
    of on or our so than that the their them then there these this to was we were what when where
    which who why will with would you your
    a aby ale ani asi by co do i jak jako je jeho jen ji jsem jsou k kde kdy ke mi mit na nad ne
    nebo od po pod pro proc při s se si ta tak te to tu u v ve z za ze že
    а бы в во вот да для до его ее её же за и из или их к как ко когда ли мне мы на не нет но о об
    от по при с со так то у уже чем что это я
    """.split()
)

# A question to the router is a whole sentence ("what is the best way to ...", "jak mám ...",
# "сколько стоит ..."), and a collection's name, description and tags are a handful of words:
# a question word that happened to occur in one description would give that collection a
# lexical rank (which RRF rewards) for nothing. So routing also drops question words, pronouns
# and auxiliaries; the query builder keeps to its measured list above.
ROUTING_STOPWORDS = STOPWORDS | frozenset(
    """
    whom those about had did could should here but any all some more most also they just only very
    such other each many much over under
    jaký jaká jaké kdo kolik proč což jsme byl byla bylo být také ještě už této tento tato toho tom
    tím mám máme mít může můžu musím který která které
    где кто какой какая какое какие сколько почему зачем этот эта эти там тут также ещё есть был
    была были быть меня мой моя мои наш наша нам нас вам вас они она оно чтобы можно нужно
    """.split()
)
