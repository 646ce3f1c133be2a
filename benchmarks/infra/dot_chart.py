"""The leaderboard page's charts: a dot per run at its mean with whiskers of ± its std, the
paper's value as a diamond, on an axis that spans the values shown. The page's script lays each
chart out, on load and again whenever the table is filtered or sorted: the chart then shows the
rows the table shows, in the table's order, on an axis rescaled to their values.

Python writes the chart's marks with their numbers (``data-`` attributes); the layout is
:data:`CHART_MATHS` (pure functions of those numbers, run by the tests outside a browser too) and
:data:`CHART_SCRIPT` (which puts the marks where the maths says).
"""

from __future__ import annotations

from html import escape as esc
from typing import Any

from benchmarks.infra.statistics import format_mean_std

#: The chart's width in SVG units (its height follows from the rows shown).
WIDTH = 560

#: Where the marks go, as pure functions (no DOM). ``runs`` are ``{mean, std, paperMean,
#: paperStd}`` (null where absent); ``p`` is ``{low, high, pad}``: the metric's bounds (null
#: where open) and the least padding either side.
#:
#: - ``chartLimits``: the axis spans every mean ± std and paper value ± std shown, padded by a
#:   tenth of that spread or ``p.pad`` if more, and kept within the bounds.
#: - ``chartTicks``: ticks at a step of 1, 2, 2.5 or 5 times a power of ten, the first that makes
#:   at most five intervals, with as many decimals as the step needs.
#: - ``chartLayout``: a row per run from the top, whiskers cut at the axis's ends.
CHART_MATHS = """
function chartLimits(runs,p){
  const starts=[],ends=[];
  runs.forEach(r=>{
    starts.push(r.mean-(r.std||0));ends.push(r.mean+(r.std||0));
    if(r.paperMean!==null){starts.push(r.paperMean-(r.paperStd||0));
                           ends.push(r.paperMean+(r.paperStd||0));}
  });
  const lo=Math.min(...starts),hi=Math.max(...ends),pad=Math.max(0.1*(hi-lo),p.pad);
  return [p.low===null?lo-pad:Math.max(lo-pad,p.low),p.high===null?hi+pad:Math.min(hi+pad,p.high)];
}
function chartTicks(left,right){
  const raw=(right-left)/5,power=Math.floor(Math.log10(raw));
  let step=null,decimals=0;
  for(const m of [1,2,2.5,5,10]){
    if(m*Math.pow(10,power)>=raw*(1-1e-9)){
      step=m*Math.pow(10,power);
      const k=m===10?power+1:power;
      decimals=Math.max(0,-k+(m===2.5?1:0));
      break;
    }
  }
  const ticks=[];
  for(let i=Math.ceil(left/step-1e-9);i<=Math.floor(right/step+1e-9);i++)
    ticks.push({value:i*step,text:(i*step).toFixed(decimals)});
  return ticks;
}
function chartLayout(runs,p,labelWidth){
  const top=34,rowHeight=28,plotLeft=Math.min(labelWidth,0.4*""" + str(WIDTH) + """)+14;
  const plotRight=""" + str(WIDTH) + """-16,[left,right]=chartLimits(runs,p);
  const x=v=>plotLeft+(Math.min(Math.max(v,left),right)-left)/(right-left)*(plotRight-plotLeft);
  const whisker=(mean,std)=>[x(mean-(std||0)),x(mean+(std||0))];
  const rows=runs.map((r,i)=>({y:top+(i+0.5)*rowHeight,dot:x(r.mean),
    whisker:whisker(r.mean,r.std),
    paper:r.paperMean===null?null:x(r.paperMean),
    paperWhisker:r.paperMean===null?null:whisker(r.paperMean,r.paperStd)}));
  const axisY=top+runs.length*rowHeight+4;
  return {width:""" + str(WIDTH) + """,height:axisY+46,left:left,right:right,plotLeft:plotLeft,
          plotRight:plotRight,top:top,axisY:axisY,rows:rows,
          ticks:chartTicks(left,right).map(t=>({x:x(t.value),text:t.text}))};
}
"""

#: Draws a chart (``svg``) with the runs named in ``order`` (all, in the page's order, when null),
#: hiding the others and the whole figure when none is left; the axis's ends are kept in
#: ``data-left`` and ``data-right``.
CHART_SCRIPT = CHART_MATHS + """
function drawChart(svg,order){
  const groups=Array.from(svg.querySelectorAll('g.cb-run'));
  const byRun=new Map(groups.map(g=>[g.dataset.run,g]));
  const shown=(order||groups.map(g=>g.dataset.run)).filter(r=>byRun.has(r)).map(r=>byRun.get(r));
  groups.forEach(g=>{g.style.display=shown.includes(g)?'':'none';});
  svg.closest('figure').hidden=shown.length===0;
  if(!shown.length)return;
  const num=v=>v===undefined||v===''?null:parseFloat(v),d=svg.dataset;
  const runs=shown.map(g=>({mean:num(g.dataset.mean),std:num(g.dataset.std),
    paperMean:num(g.dataset.paperMean),paperStd:num(g.dataset.paperStd)}));
  const labels=shown.map(g=>g.querySelector('.cb-label')),cap=0.4*""" + str(WIDTH) + """;
  labels.forEach(t=>{  // a label wider than the cap is cut, with an ellipsis
    const full=t.dataset.full;
    t.textContent=full;
    for(let n=full.length-1;n>3&&t.getComputedTextLength()>cap;n--)
      t.textContent=full.slice(0,n)+'\\u2026';
  });
  const at=chartLayout(runs,{low:num(d.low),high:num(d.high),pad:num(d.pad)},
                       Math.max(...labels.map(t=>t.getComputedTextLength())));
  svg.setAttribute('viewBox',`0 0 ${at.width} ${at.height}`);
  d.left=at.left;d.right=at.right;
  const set=(el,attrs)=>{if(el)Object.entries(attrs).forEach(([k,v])=>el.setAttribute(k,v));};
  const line=(el,[x1,x2],y)=>set(el,{x1:x1,x2:x2,y1:y,y2:y});
  shown.forEach((g,i)=>{
    const r=at.rows[i];
    set(g.querySelector('.cb-label'),{x:at.plotLeft-8,y:r.y+4.5});
    line(g.querySelector('.cb-whisker'),r.whisker,r.y);
    set(g.querySelector('.cb-dot'),{cx:r.dot,cy:r.y});
    set(g.querySelector('.cb-value'),{x:r.dot,y:r.y-7});
    if(r.paper!==null){
      line(g.querySelector('.cb-paper-whisker'),r.paperWhisker,r.y);
      set(g.querySelector('.cb-paper'),{transform:`translate(${r.paper},${r.y})`});
    }
  });
  const axis=svg.querySelector('g.cb-axis'),make=(name,attrs,text)=>{
    const el=document.createElementNS(svg.namespaceURI,name);set(el,attrs);
    if(text!==undefined)el.textContent=text;axis.appendChild(el);};
  axis.replaceChildren();
  make('line',{x1:at.plotLeft,x2:at.plotRight,y1:at.axisY,y2:at.axisY,class:'cb-baseline'});
  at.ticks.forEach(t=>{
    make('line',{x1:t.x,x2:t.x,y1:at.top,y2:at.axisY,class:'cb-grid'});
    make('text',{x:t.x,y:at.axisY+16,'text-anchor':'middle',class:'cb-tick'},t.text);
  });
  set(svg.querySelector('.cb-xlabel'),{x:(at.plotLeft+at.plotRight)/2,y:at.axisY+38});
}
"""

#: The chart's own style (the page's stylesheet holds it).
CHART_CSS = """
svg.cb-chart{font-family:system-ui,sans-serif;font-size:13px}
svg.cb-chart .cb-grid{stroke:#ddd}
svg.cb-chart .cb-baseline{stroke:#555}
svg.cb-chart .cb-whisker{stroke:#4c72b0;stroke-width:1.5}
svg.cb-chart .cb-dot{fill:#4c72b0}
svg.cb-chart .cb-paper-whisker{stroke:#000;stroke-width:1.2}
svg.cb-chart .cb-paper{fill:#000}
svg.cb-chart .cb-value,svg.cb-chart .cb-tick{font-size:11px}
"""

_DIAMOND = "M0,-5L5,0L0,5L-5,0Z"


def _number(name: str, value: float | None) -> str:
    return "" if value is None else f' data-{name}="{float(value)!r}"'


def dot_chart_svg(marks: list[dict[str, Any]], *, low: float | None, high: float | None,
                  min_pad: float, axis_label: str, alt: str) -> str:
    """A chart's SVG, its marks not yet placed (the page's script places them).

    ``marks``, in the page's order: ``run`` (the name the table's rows carry), ``label``,
    ``mean``, ``std``, ``paper_mean``, ``paper_std`` (None where absent) and ``text`` (the mean
    as the chart prints it). ``low`` and ``high`` bound the axis (None where the metric's range
    is open); ``min_pad`` is the least padding either side of the values."""
    paper = any(m["paper_mean"] is not None for m in marks)
    runs = []
    for m in marks:
        title = m["label"] + ": " + m["text"] + (
            f" ± {m['std']:.2f}" if m["std"] is not None else "") + (
            "; paper " + format_mean_std(m["paper_mean"], m["paper_std"], "g")
            if m["paper_mean"] is not None else "")
        runs.append(
            f'<g class="cb-run" data-run="{esc(m["run"])}"' + _number("mean", m["mean"])
            + _number("std", m["std"]) + _number("paper-mean", m["paper_mean"])
            + _number("paper-std", m["paper_std"]) + f"><title>{esc(title)}</title>"
            f'<text class="cb-label" text-anchor="end" data-full="{esc(m["label"])}">'
            f'{esc(m["label"])}</text><line class="cb-whisker"/><circle class="cb-dot" r="4.5"/>'
            f'<text class="cb-value" text-anchor="middle">{esc(m["text"])}</text>'
            + ('<line class="cb-paper-whisker"/>'
               f'<path class="cb-paper" d="{_DIAMOND}"/>' if m["paper_mean"] is not None else "")
            + "</g>")
    legend = ('<g class="cb-legend"><circle class="cb-dot" cx="12" cy="12" r="4.5"/>'
              '<text x="22" y="16.5">ours: mean ± std over seeds</text>'
              + (f'<path class="cb-paper" d="{_DIAMOND}" transform="translate(232,12)"/>'
                 "<text x=\"242\" y=\"16.5\">paper's value (± its std)</text>" if paper else "")
              + "</g>")
    bounds = _number("low", low) + _number("high", high) + _number("pad", min_pad)
    return (f'<svg class="cb-chart" viewBox="0 0 {WIDTH} 120" role="img" '
            f'aria-label="{esc(alt)}"{bounds}>{legend}<g class="cb-axis"></g>' + "".join(runs)
            + f'<text class="cb-xlabel" text-anchor="middle">{esc(axis_label)}</text></svg>')
